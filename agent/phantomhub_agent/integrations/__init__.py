"""Framework integrations: ``lightning.PhantomHubCallback`` and ``transformers.PhantomHubCallback``."""
