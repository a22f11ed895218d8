"""crl: generalization bounds for contrastive representation learning, evaluated at scale."""

__version__ = "0.1.0"
