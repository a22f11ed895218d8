"""Unimodal cells (Saunshi et al. 2019; Li et al. 2026's SCRL/SSCRL): one modality, a frozen
encoder, a linear head in the ball; the sample, the cell and its certified bounds."""
