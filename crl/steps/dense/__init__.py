"""Dense cells (Dense InfoNCE on feature grids): image views, a frozen backbone, position
features, the cell, its bounds, the checks before any work and the report section."""
