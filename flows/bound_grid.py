"""Deployment entrypoint `flows/bound_grid.py:bound_grid` (body: crl.orchestration.flows)."""

from crl.orchestration.flows import bound_grid as bound_grid
