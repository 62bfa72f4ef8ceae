"""Model runners: :class:`OmModel` runs an Ascend offline model (``.om``) over ``acl.mdl`` on the pipeline's
device memory; :func:`sim_model` registers a numpy function as a model for the software device;
:func:`from_config` builds a runner from a deployment's ``model:`` section. Not run on hardware.
"""
from .config import OmSpec, from_config, from_spec, parse_config
from .om import ModelInputError, OmModel
from .sim import drop_sim_model, sim_model

__all__ = ["OmModel", "ModelInputError", "sim_model", "drop_sim_model", "from_config", "from_spec", "parse_config",
           "OmSpec"]
