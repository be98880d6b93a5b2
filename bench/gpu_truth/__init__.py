"""GPU ground truth: measure real transformers/peft memory on a CUDA device, case by case.

`cases.toml` lists the cases, `run.py` drives one worker process per case (`measure_case.py`),
`results_schema.py` defines the CSV the runs write and `read_results` that checks it.
Importing this package imports neither torch nor transformers.
"""
