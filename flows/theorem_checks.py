"""Deployment entrypoint `flows/theorem_checks.py:theorem_checks`.

The body is crl.orchestration.flows.theorem_checks.
"""

from crl.orchestration.flows import theorem_checks as theorem_checks
