"""Latent models with known population quantities.

`model`: Saunshi et al.'s latent-class model and its samplers; `population`: its exact and Monte
Carlo population risks; `two_modality`: Li et al.'s two-modality Gaussian with its optimal score.
"""

from crl.kernels.latent.model import LatentClassModel as LatentClassModel
from crl.kernels.latent.model import Representation as Representation
from crl.kernels.latent.model import Triplets as Triplets
from crl.kernels.latent.model import Tuples as Tuples
from crl.kernels.latent.model import uniform_prior as uniform_prior
from crl.kernels.latent.model import zipf_prior as zipf_prior
from crl.kernels.latent.population import Population as Population
from crl.kernels.latent.population import PopulationMC as PopulationMC
from crl.kernels.latent.population import population as population
from crl.kernels.latent.population import population_mc as population_mc
from crl.kernels.latent.two_modality import Estimate as Estimate
from crl.kernels.latent.two_modality import ScoreFn as ScoreFn
from crl.kernels.latent.two_modality import TwoModalityGaussian as TwoModalityGaussian

__all__ = [
    "Estimate",
    "LatentClassModel",
    "Population",
    "PopulationMC",
    "Representation",
    "ScoreFn",
    "Triplets",
    "Tuples",
    "TwoModalityGaussian",
    "population",
    "population_mc",
    "uniform_prior",
    "zipf_prior",
]
