"""Kopf registrations only: the one package that imports kopf. Handlers register and delegate; they hold no logic."""
