"""What older operator versions left on a VLLMService, taken off by the reconcile (#32).

Versions with a Kopf timer made Kopf add `LEGACY_FINALIZER` to every VLLMService; Kopf removed it
again on resume while it still watched the VLLMServices. They are now watched by
kube/informer.py, which has no finalizer logic, so the reconcile removes it: without that, a
service created before such an upgrade would stay Terminating forever once deleted.
"""

import logging

from vllm_operator.api.service import LEGACY_FINALIZER
from vllm_operator.kube.bodies import VLLMServiceBody
from vllm_operator.kube.gateway import KubeGateway, Obj

log = logging.getLogger(__name__)


def drop_legacy_finalizer(gw: KubeGateway, body: Obj) -> bool:
    """Remove the old finalizer when `body` carries it; True when a patch was sent. Only that
    entry, tested in place (`KubeGateway.remove_service_finalizer`): another controller's finalizer
    is never touched, and a list that moved meanwhile is a ConflictError (read again, retried)."""
    service = VLLMServiceBody(body)
    finalizers = service.meta.finalizers
    if LEGACY_FINALIZER not in finalizers:
        return False
    namespace, name = service.key
    gw.remove_service_finalizer(
        namespace, name, LEGACY_FINALIZER, finalizers.index(LEGACY_FINALIZER)
    )
    log.info("Removed an older version's finalizer service=%s/%s", namespace, name)
    return True


__all__ = ["drop_legacy_finalizer"]
