"""Training the IPR prompt refiner: the labelled image dataset, SFT and GRPO (TRL + PEFT LoRA)."""
