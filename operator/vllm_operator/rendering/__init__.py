"""Pure rendering: plan and spec in, Deployment / Service / PodDisruptionBudget objects out."""
