"""The dense family's math: Dense InfoNCE on feature grids and its correspondences (info_nce),
the per-image loss (image), the certified per-image bounds (bounds), the shared-queue bounds
(queue), the lower bound on the mutual information (mi), the memory queue (memory), random
resized crops and their correspondence (crops), and crl's procedural images (images)."""
