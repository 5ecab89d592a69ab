"""The model checks: what a model must satisfy on a sample batch, before any training.

passes.py            the passes several checks share (TrainPass, Runner) and bit-level checksums
gradients.py         gradient_flow, finite;   at_init.py   init_loss, determinism, global_rng, twins
dependence.py        batch_independence, causality, word_order, input_dependence
first_break.py       the first module whose output breaks such a property
document_isolation.py  packed documents a batch declares stay apart
watched_forward.py   one eval-mode forward watched from inside, read by architecture.py (residual,
                     attention_scale, stable_log_probs) and score_scale.py (the factor on q·kᵀ)"""
