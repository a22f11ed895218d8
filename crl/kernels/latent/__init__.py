"""Latent models with known population quantities.

`model`: Saunshi et al.'s latent-class model and its samplers; `population`: its exact and Monte
Carlo population risks; `two_modality`: Li et al.'s two-modality Gaussian with its optimal score;
`canonical`: the same model in canonical-correlation form with the exact LSE risk of the score
x^T M y - y^T B y and excess AUC on fixed triples (the m*(n) experiments).
"""

from crl.kernels.latent.canonical import CanonicalGaussian as CanonicalGaussian
from crl.kernels.latent.canonical import ExcessAuc as ExcessAuc
from crl.kernels.latent.canonical import Triples as Triples
from crl.kernels.latent.canonical import excess_auc as excess_auc
from crl.kernels.latent.canonical import sample_triples as sample_triples
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
    "CanonicalGaussian",
    "Estimate",
    "ExcessAuc",
    "LatentClassModel",
    "Population",
    "PopulationMC",
    "Representation",
    "ScoreFn",
    "Triplets",
    "Tuples",
    "Triples",
    "TwoModalityGaussian",
    "excess_auc",
    "population",
    "population_mc",
    "sample_triples",
    "uniform_prior",
    "zipf_prior",
]
