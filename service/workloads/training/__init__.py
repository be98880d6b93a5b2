"""Readers of fine-tuning jobs: trainer command lines, their config files, and the Kubernetes
objects that run them, read into the fields of the fine-tune estimate with their sources.

- :mod:`.settings`: what a job is read into (`TrainingCommand`, `Setting`, `OptionRead`);
- :mod:`.files`: the config files a request carries, and their bounded parsing;
- :mod:`.launchers`: torchrun, accelerate, deepspeed, trl, llamafactory-cli, axolotl and
  tune: the process count and the trainer;
- :mod:`.hf_arguments`, :mod:`.hf_trainer`: Hugging Face ``TrainingArguments`` and TRL flags;
- :mod:`.distributed`: DeepSpeed, accelerate and FSDP configs;
- :mod:`.recipes`: the LLaMA-Factory, axolotl and torchtune YAML recipes;
- :mod:`.rules`: what the trainers' shared names mean (optimizers, attention, dtypes);
- :mod:`.kinds`: PyTorchJob, TrainJob, JobSet, RayJob, Kueue Workload, batch Job and Pod.
"""
