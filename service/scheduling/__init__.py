"""Scheduler-facing answers built on the estimator: pre-flight checks of workloads and command
lines, the admission webhook's decision, and the scheduler extender's filter and scores.

`plan` turns what a scheduler holds (a `service.workloads` reading) into the estimate request
it stands for; `check` answers it; `preflight`, `admission` and `extender` shape the answers
each caller consumes. Plain Python: no FastAPI; the routes in `service/api/routes/scheduling.py`
only parse and serialize.
"""
