-- Argo CD health check for inference.networking.k8s.io/InferencePool (spec.routing inferencePool
-- of a VLLMService, #31). The pool's status is written by the gateways that route to it: one
-- entry per parent (Gateway) in status.parents, each with Accepted and ResolvedRefs conditions
-- (Gateway API Inference Extension v1). Install under
-- resource.customizations.health.inference.networking.k8s.io_InferencePool in argocd-cm
-- (docs/gitops.md).
--
-- Mapping (first match wins):
--   no status.parents (no gateway routes to the pool yet)   -> Healthy   (nothing reported: the
--                                                               pool itself is valid; the
--                                                               VLLMService reports its pods)
--   a parent with Accepted=False                           -> Degraded  (the gateway refused it)
--   a parent with ResolvedRefs=False                       -> Degraded  (e.g. the picker Service
--                                                               is missing)
--   a parent with Accepted or ResolvedRefs Unknown/absent  -> Progressing (not yet processed)
--   every parent Accepted=True and ResolvedRefs=True       -> Healthy
local hs = {}
local parents = {}
if obj.status ~= nil and obj.status.parents ~= nil then
  parents = obj.status.parents
end
if #parents == 0 then
  hs.status = "Healthy"
  hs.message = "No gateway reports on this InferencePool yet"
  return hs
end

local function parent_name(p)
  if p.parentRef ~= nil and p.parentRef.name ~= nil then
    return tostring(p.parentRef.name)
  end
  return "?"
end

local pending = nil
for _, p in ipairs(parents) do
  local found = {}
  if p.conditions ~= nil then
    for _, c in ipairs(p.conditions) do
      found[c.type] = c
    end
  end
  for _, t in ipairs({"Accepted", "ResolvedRefs"}) do
    local c = found[t]
    if c ~= nil and c.status == "False" then
      hs.status = "Degraded"
      hs.message = "Gateway " .. parent_name(p) .. ": " .. t .. "=False " .. tostring(c.reason or "")
        .. ": " .. tostring(c.message or "")
      return hs
    end
    if (c == nil or c.status ~= "True") and pending == nil then
      pending = "Gateway " .. parent_name(p) .. ": waiting for " .. t
    end
  end
end
if pending ~= nil then
  hs.status = "Progressing"
  hs.message = pending
  return hs
end
hs.status = "Healthy"
hs.message = tostring(#parents) .. " gateway(s) accepted the pool and resolved its picker"
return hs
