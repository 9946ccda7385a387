-- Argo CD health check for leaderworkerset.x-k8s.io/LeaderWorkerSet (the workload of a vLLM
-- multi-node pool: one group of pods, one per node, per replica). Argo CD has no built-in check
-- for this custom resource, so without this a VLLMService's multi-node pool shows no health.
-- Install under resource.customizations.health.leaderworkerset.x-k8s.io_LeaderWorkerSet in
-- argocd-cm (docs/gitops.md). Counts are groups: the LeaderWorkerSet controller counts a group
-- ready when every pod of it is. The set reports no observedGeneration; its UpdateInProgress
-- condition says a rolling update of the groups is under way.
--
-- Mapping (first match wins):
--   no status                                          -> Progressing (not yet seen by its controller)
--   spec.replicas == 0                                 -> Suspended   (scaled to zero)
--   UpdateInProgress=True                              -> Progressing (groups rolling to a new template)
--   ready and updated groups >= spec.replicas          -> Healthy
--   otherwise                                          -> Progressing (groups starting or recreating)
-- Crashes are not visible here (a crashing group restarts as a whole); the VLLMService's own health
-- (vllmservice-health.lua) reports them as Degraded.

local hs = {}
local spec = obj.spec or {}
local status = obj.status
local desired = spec.replicas
if desired == nil then
  desired = 1
end

if status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the LeaderWorkerSet controller"
  return hs
end
if desired == 0 then
  hs.status = "Suspended"
  hs.message = "Scaled to zero groups (spec.replicas is 0)"
  return hs
end

local ready = status.readyReplicas or 0
local updated = status.updatedReplicas or 0
local groups = tostring(ready) .. "/" .. tostring(desired) .. " groups ready"
if status.conditions ~= nil then
  for _, c in ipairs(status.conditions) do
    if c.type == "UpdateInProgress" and c.status == "True" then
      hs.status = "Progressing"
      hs.message = "Rolling update: " .. tostring(updated) .. "/" .. tostring(desired)
        .. " groups updated, " .. groups
      return hs
    end
  end
end
if ready >= desired and updated >= desired then
  hs.status = "Healthy"
  hs.message = groups
  return hs
end
hs.status = "Progressing"
hs.message = groups
return hs
