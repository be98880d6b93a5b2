# Fine-tuning validation data: reference-tracer runs over the grid in
# bench/validate/train_tracer.py (seconds per shallow run on a CPU, one process at a time;
# resumes from the committed file).
# `make tracer-data-finetune` appends missing runs; FRESH=1 regenerates everything.
.PHONY: tracer-data-finetune validate-finetune

tracer-data-finetune:
	$(PY) -m bench.validate.train_tracer $(if $(FRESH),--fresh,)

validate-finetune:
	$(PY) -m bench.validate.finetune
