"""Level-based reconcile: gather, plan, render, apply and write status, one function per concern."""
