"""No Kopf diff-base at all: the operator registers no change-detecting handler (#32).

Why: on every watch event of every watched kind Kopf fetches the object's stored diff-base and
builds its "essence" (`settings.persistence.diffbase_storage.fetch`/`build`,
kopf/_core/reactor/processing.py `_detect_causes`): with Kopf's annotations storage a
`copy.deepcopy` of the whole body (status and managedFields included), copied once more by
`progress_storage.clear`. Only change-detecting handlers (`on.create`/`on.update`/`on.resume`/
`on.delete`, fed by the diff) and daemons or timers (their idle reset) read it, and only they make
Kopf store it (one annotation PATCH per create and update) or keep handler progress. The
operator has none: every resource handler is an index or event handler, and the VLLMService's
event handler decides itself what needs a reconcile (reconcile/triggers.py `ServiceChanges`).
So the diff-base costs CPU (18 % of a 300-service converge in the py-spy profile, before #32
dropped the copies) and buys nothing.

`NoDiffBaseStorage` builds an empty essence without copying, finds no stored one and stores
nothing. tests/handlers/test_kopf_essence.py checks that Kopf's registry holds no
change-detecting handler, daemon or timer, so one added later fails a test instead of silently
seeing no change.
"""

from __future__ import annotations

from typing import Any

import kopf


class NoDiffBaseStorage(kopf.DiffBaseStorage):
    """A diff-base storage that builds, fetches and stores nothing."""

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        return kopf.BodyEssence()

    def fetch(self, *, body: Any) -> Any:
        return None

    def store(self, *, body: Any, patch: Any, essence: Any) -> None:
        return None


__all__ = ["NoDiffBaseStorage"]
