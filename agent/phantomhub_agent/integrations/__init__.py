"""Framework integrations: ``lightning.PhantomHubCallback``, ``transformers.PhantomHubCallback``,
and ``dcp`` for torch.distributed.checkpoint."""
