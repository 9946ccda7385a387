"""Kopf's diff-base only for the kinds with change-detecting handlers (#32, converge profile).

Why: on every watch event of every watched kind Kopf builds the object's "essence" (its
diff-base: `settings.persistence.diffbase_storage.build`, kopf/_core/reactor/processing.py
`_detect_causes`), a `copy.deepcopy` of the whole body (status and managedFields included) from
which it then deletes the metadata and status, and copies the result once more
(`progress_storage.clear`). Only change-detecting handlers (`on.create`/`on.update`/
`on.resume`/`on.delete`, fed by the diff) and daemons or timers (their idle reset) read it. Of the
operator's watched kinds only the VLLMService has such handlers; its pods, Deployments, Services,
PDBs, nodes and the rest have index and event handlers only. The py-spy profile of a 300-service
converge (GIL samples) put 18 % of the operator's CPU in these two copies, nearly all of them of
pods and Deployments, whose essences nothing read.

`SelectiveDiffBaseStorage` is Kopf's own annotations storage with one change: a body whose
apiVersion and kind are not in `changing` gets an empty essence without any copy. The VLLMService
keeps Kopf's behaviour (the same essence, fetch and store), built from the body without its status
and managedFields, which Kopf's essence drops anyway after copying them. The kinds are named where the
handlers are registered (handlers/registrations.py `CHANGING_KINDS`);
tests/handlers/test_kopf_essence.py checks that Kopf's registry holds change-detecting handlers,
daemons and timers for no other resource, so a handler added for another kind later fails a test
instead of silently diffing empty essences.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import kopf

ApiKind = tuple[str, str]  # (apiVersion, kind) as a watched body carries them


class SelectiveDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """Kopf's annotations diff-base storage, building essences only for `changing` kinds."""

    def __init__(self, *, changing: Iterable[ApiKind], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.changing = frozenset(changing)

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        kind = (body.get("apiVersion"), body.get("kind"))
        if None not in kind and kind not in self.changing:
            # Nothing reads it: no change-detecting handler, daemon or timer for this kind. (A
            # body without apiVersion or kind, which Kopf's listings and watches never hand
            # over, keeps Kopf's essence.)
            return kopf.BodyEssence()
        if extra_fields:
            return super().build(body=body, extra_fields=extra_fields)
        # Kopf's essence drops the status and all metadata but labels and annotations after
        # copying them; leaving the status and managedFields out before the copy gives the same
        # essence for a fraction of the copying (a converged service's status is most of it).
        meta = body.get("metadata") or {}
        slim = {k: v for k, v in body.items() if k != "status"}
        slim["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
        return super().build(body=kopf.Body(cast(Any, slim)), extra_fields=None)


__all__ = ["ApiKind", "SelectiveDiffBaseStorage"]
