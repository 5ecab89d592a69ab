"""The model checks: what a model must satisfy on a sample batch, before any training.

passes.py             the passes several checks share gradients.py          gradient_flow, finite;
at_init.py   init_loss, determinism, global_rng, twins dependence.py         batch_independence, causality,
word_order, input_dependence first_break.py        the first module that breaks such a property
document_isolation.py document_isolation watched_forward.py    one watched forward: architecture.py's checks,
score_scale.py's factor"""
