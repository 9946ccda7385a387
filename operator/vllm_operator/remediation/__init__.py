"""Pure remediation policy: observations and history in, a bounded, explained action out."""
