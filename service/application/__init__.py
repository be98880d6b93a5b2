"""The application layer: what the HTTP routes and the scheduling services share.

Resolving the names a request gives (catalog model, posted config, GPU), turning a request
body into the estimator's typed request, answering it, rendering the answer and counting it
in the metrics. It sits above the estimator, the catalogs and the wire schemas, and below
both ``service.scheduling`` and ``service.api``, which import it and never each other's
internals from below.
"""
