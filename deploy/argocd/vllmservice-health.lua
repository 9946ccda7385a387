-- Argo CD health check for serving.vllm-operator.dev/VLLMService.
-- Install under resource.customizations.health.serving.vllm-operator.dev_VLLMService in argocd-cm
-- (docs/gitops.md). Argo CD runs this with the live object in `obj` and expects {status, message}.
--
-- Mapping (first match wins):
--   no status                                                    -> Progressing (not yet reconciled)
--   Degraded=True ApplyRejected / ApiRequestFailed / ReconcileError of this generation
--                                                                -> Degraded   (reconcile failed, retried)
--   observedGeneration behind metadata.generation                -> Progressing (not yet reconciled)
--   spec.replicas == 0                                           -> Suspended  (scaled to zero on purpose)
--   Feasible=False (Infeasible: the intent cannot fit any GPU)   -> Degraded   (a spec change is needed)
--   Degraded=True with a memory crash the operator remediates
--     (StartupOOM, RuntimeOOM, HostOOM, StartupKVInsufficient,
--     StartupFreeMemory), MemoryPressure=True, mode auto         -> Progressing (the operator is acting)
--   Degraded=True  (PoolsUnavailable, Crashing, StartupStalled, CanaryFailed,
--     UnrecognizedArguments, a memory crash nobody acts on, ...)  -> Degraded
--   Progressing=True CanaryObserving (a new plan on one canary pod) -> Progressing
--   Progressing=False reason NoMatchingNodes                     -> Degraded   (no node of an allowed GPU type;
--                                                                   re-planned automatically when one appears),
--                                                                   unless placement.strategy Preferred is Ready
--                                                                   (the replicas spilled to another type)
--   MemoryPressure=True, remediation mode auto                   -> Progressing (the operator is acting)
--   MemoryPressure=True, remediation mode recommend/off          -> Degraded   (nobody acts unless a human does)
--   Ready=True                                                   -> Healthy (spilled replicas of placement.strategy
--                                                                   Preferred are named in the message)
--   otherwise (RollingOut, PodsNotReady, AwaitingNodes)          -> Progressing
-- Canary messages end with status.plans (which plan runs, is tried, failed, was last good).
-- The remediation mode alone never makes a service Suspended: recommend/off only decide who acts
-- on memory pressure, the service still serves traffic.

local hs = {}

local function condition(conditions, ctype)
  if conditions == nil then
    return nil
  end
  for _, c in ipairs(conditions) do
    if c.type == ctype then
      return c
    end
  end
  return nil
end

local function describe(c, fallback)
  if c == nil then
    return fallback
  end
  local text = c.reason or fallback
  if c.message ~= nil and c.message ~= "" then
    text = text .. ": " .. c.message
  end
  return text
end

local spec = obj.spec or {}
local status = obj.status

local function with_plans(text)
  if status ~= nil and status.plans ~= nil and status.plans ~= "" then
    return text .. " (" .. status.plans .. ")"
  end
  return text
end
local generation = (obj.metadata or {}).generation

if status == nil or status.observedGeneration == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for vllm-operator to reconcile this VLLMService"
  return hs
end
-- A reconcile of the current generation that failed (the API server refused an object, or an
-- internal error) leaves observedGeneration behind on purpose (it is retried until it catches up);
-- its Degraded condition names the generation it was computed from.
local failed = condition(status.conditions, "Degraded")
if failed ~= nil and failed.status == "True" and failed.observedGeneration == generation
  and (failed.reason == "ApplyRejected" or failed.reason == "ApiRequestFailed"
    or failed.reason == "ReconcileError") then
  hs.status = "Degraded"
  hs.message = describe(failed, "Degraded")
  return hs
end
if generation ~= nil and status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for vllm-operator to observe generation " .. tostring(generation)
    .. " (observed " .. tostring(status.observedGeneration) .. ")"
  return hs
end

if spec.replicas == 0 then
  hs.status = "Suspended"
  hs.message = "Scaled to zero (spec.replicas is 0)"
  return hs
end

local conditions = status.conditions
local feasible = condition(conditions, "Feasible")
local degraded = condition(conditions, "Degraded")
local progressing = condition(conditions, "Progressing")
local pressure = condition(conditions, "MemoryPressure")
local ready = condition(conditions, "Ready")
local is_ready = ready ~= nil and ready.status == "True"
-- placement.strategy Preferred: replicas serving on a less preferred GPU type are by design.
local preferred = (spec.placement or {}).strategy == "Preferred"
local placement = status.placement or {}

if feasible ~= nil and feasible.status == "False" then
  hs.status = "Degraded"
  hs.message = describe(feasible, "Infeasible")
  return hs
end
local function remediated_crash(c)
  return c.reason == "StartupOOM" or c.reason == "RuntimeOOM" or c.reason == "HostOOM"
    or c.reason == "StartupKVInsufficient" or c.reason == "StartupFreeMemory"
end

local mode = (spec.remediation or {}).mode or "auto"
if degraded ~= nil and degraded.status == "True" then
  if mode == "auto" and remediated_crash(degraded) and pressure ~= nil and pressure.status == "True" then
    hs.status = "Progressing"
    hs.message = "Remediating memory pressure: " .. describe(pressure, "MemoryPressure")
      .. " (" .. describe(degraded, "Degraded") .. ")"
    return hs
  end
  hs.status = "Degraded"
  hs.message = describe(degraded, "Degraded")
  if degraded.reason == "CanaryFailed" then
    hs.message = with_plans(hs.message)
  end
  return hs
end
if progressing ~= nil and progressing.status == "True" and progressing.reason == "CanaryObserving" then
  hs.status = "Progressing"
  hs.message = with_plans(describe(progressing, "CanaryObserving"))
  return hs
end
if progressing ~= nil and progressing.status == "False" and progressing.reason == "NoMatchingNodes"
  and not (preferred and is_ready) then
  hs.status = "Degraded"
  hs.message = describe(progressing, "NoMatchingNodes")
  return hs
end
if pressure ~= nil and pressure.status == "True" then
  if mode == "auto" then
    hs.status = "Progressing"
    hs.message = "Remediating memory pressure: " .. describe(pressure, "MemoryPressure")
  else
    hs.status = "Degraded"
    hs.message = "Memory pressure (remediation mode " .. mode .. ", no automatic action): "
      .. describe(pressure, "MemoryPressure")
  end
  return hs
end
if is_ready then
  hs.status = "Healthy"
  hs.message = describe(ready, "Ready")
  if preferred and (placement.spilled or 0) > 0 then
    hs.message = hs.message .. "; " .. tostring(placement.spilled)
      .. " replica(s) spilled to a less preferred GPU type: " .. tostring(placement.summary)
  end
  return hs
end

hs.status = "Progressing"
if progressing ~= nil and progressing.status == "True" then
  hs.message = describe(progressing, "Progressing")
else
  hs.message = describe(ready, "Waiting for the pools to become ready")
end
return hs
