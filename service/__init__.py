"""GPU-memory estimator for large language models: a stateless JSON API."""

__version__ = "0.1.0"
