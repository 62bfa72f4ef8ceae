"""Deployments: a YAML file describing cameras, their sources, synchronisation, preprocessing,
latency budgets, outputs and a model hook, and the streaming runner that executes it.

::

    from dvpipe.deploy import load_deployment, Runner
    dep = load_deployment("configs/deployments/nuscenes-bevformer-tiny.yaml")
    result = Runner(dep).run()          # or: with Runner(dep) as r: for rb in r.batches(): ...
    print(result.summary())
    print(result.stats.report())

See :mod:`dvpipe.deploy.config` for the schema, :mod:`dvpipe.deploy.sources` for the source types,
:mod:`dvpipe.deploy.sync` for frame-set policies and :mod:`dvpipe.deploy.runner` for the threads.
"""
from .config import Deployment, DeploymentError, load_deployment
from .runner import RunError, Runner, RunResult
from .summary import Accounting

__all__ = ["Deployment", "DeploymentError", "load_deployment", "Runner", "RunResult", "RunError", "Accounting"]
