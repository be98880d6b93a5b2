"""Readers of fine-tuning jobs: trainer command lines, their config files, and the Kubernetes
objects that run them, read into the fields of the fine-tune estimate with their sources.

- :mod:`.settings`: what a job is read into (`TrainingCommand`, `Setting`, `OptionRead`);
- :mod:`.files`: the config files a request carries, and their bounded parsing;
- :mod:`.launchers`: find the trainer in a command line (python, torchrun, accelerate,
  deepspeed, trl); :mod:`.launch_args` the launchers' options and process counts;
  :mod:`.recipe_clis` ``llamafactory-cli``, ``axolotl train`` and ``tune run``;
- :mod:`.hf_arguments`, :mod:`.hf_trainer`: Hugging Face ``TrainingArguments`` and TRL flags;
- :mod:`.distributed`: DeepSpeed, accelerate and FSDP configs;
- :mod:`.recipes` (shared), :mod:`.llamafactory`, :mod:`.axolotl`, :mod:`.torchtune`: the
  YAML recipes;
- :mod:`.rules`: what the trainers' shared names mean (optimizers, attention, dtypes);
- :mod:`.kinds`: the pod templates of PyTorchJob, TrainJob, JobSet, RayJob, Kueue Workload,
  batch Job and Pod; :mod:`.objects` their trainer containers and mounted config files.
"""
