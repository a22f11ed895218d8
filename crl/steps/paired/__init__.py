"""Paired cells (Li et al. 2026): two modalities scored by a bilinear model; cells drawn from the
canonical Gaussian (`model_cell`) or from user pair files (`split_cell`), and the m*(n) report."""
