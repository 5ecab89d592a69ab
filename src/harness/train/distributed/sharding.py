"""trainer=fsdp: `FSDP`, FSDP2 (`fully_shard`) through Lightning's ModelParallelStrategy, each rank holding
1/ranks of every weight, gradient and optimizer state; units are the model's repeated blocks."""

from __future__ import annotations

import logging

import torch
from pytorch_lightning.strategies import ModelParallelStrategy
from torch import nn

from harness.errors import ConfigError
from harness.train.distributed.devices import strategy_name

# FSDP2, not Lightning's FSDPStrategy (FSDP1): each parameter stays the model's, under its own name, a DTensor
# sharded on dim 0, so a probe can name a layer and read its shard; FSDP1 flattens a unit into one buffer.

log = logging.getLogger(__name__)

#: trainer.strategy.mixed_precision: the dtype weights are gathered and computed in (gradients reduced in fp32)
PRECISIONS = {"bf16": torch.bfloat16, "fp16": torch.float16}


def _shard_units(model: nn.Module) -> list[nn.Module]:
    """The model's repeated blocks, in order: the children of the outermost ModuleLists of one class."""
    found: list[nn.Module] = []

    def visit(module: nn.Module) -> None:
        children = list(module.children())
        if isinstance(module, nn.ModuleList) and len(children) > 1 and len({type(c) for c in children}) == 1:
            found.extend(children)
            return
        for child in children:
            visit(child)

    visit(model)
    return found


def unit_names(model: nn.Module) -> list[str]:
    """The units' module names (`blocks.0`, ...), as the run's log names them."""
    wanted = {id(unit) for unit in _shard_units(model)}
    return [name for name, module in model.named_modules() if id(module) in wanted]


def _is_sharded(model: nn.Module) -> bool:
    """Whether `model` went through fully_shard already (configure_model runs at every fit and validate)."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


class FSDP(ModelParallelStrategy):
    """ModelParallelStrategy with every process a data-parallel rank, sharded by `shard`
    (conf/trainer/fsdp.yaml)."""

    def __init__(
        self,
        mixed_precision: str | None = None,
        activation_checkpointing: bool = False,
        reshard_after_forward: bool = True,
        save_distributed_checkpoint: bool = False,
        meta_init: bool = False,
        process_group_backend: str | None = None,
    ):
        if mixed_precision is not None and mixed_precision not in PRECISIONS:
            raise ConfigError(
                "trainer.strategy.mixed_precision",
                mixed_precision,
                f"choose one of {', '.join(PRECISIONS)}, or null for fp32",
            )
        super().__init__(
            save_distributed_checkpoint=save_distributed_checkpoint,
            process_group_backend=process_group_backend,
        )
        self.mixed_precision = mixed_precision
        # the model is built before the Trainer exists: build_parts reads the key from the config (on_meta)
        self.meta_init = bool(meta_init)
        self.activation_checkpointing = bool(activation_checkpointing)
        self.reshard_after_forward = bool(reshard_after_forward)

    def setup_environment(self) -> None:
        """Every process a data-parallel rank: a mesh of ranks x 1 (the base class's is tensor parallel)."""
        self._data_parallel_size = self.num_processes * self.num_nodes
        self._tensor_parallel_size = 1
        super().setup_environment()

    def on_validation_end(self) -> None:
        """After every validation (the sanity check's too): the model back to its slices."""
        super().on_validation_end()
        reshard(self.lightning_module)

    def shard(self, model: nn.Module) -> None:
        """fully_shard each unit, then the model (activation checkpointing on each unit first); a model
        already sharded is left as it is."""
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        if _is_sharded(model):
            return
        mesh = self.device_mesh["data_parallel"]
        options: dict = {"mesh": mesh}
        if self.mixed_precision:
            dtype = PRECISIONS[self.mixed_precision]
            options["mp_policy"] = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
        blocks, names = _shard_units(model), unit_names(model)
        if self.activation_checkpointing:
            from harness.compat import checkpoint_activations

            for block in blocks:
                checkpoint_activations(block)  # composable: the parameters keep their names (no wrapper)
        for block in blocks:
            fully_shard(block, reshard_after_forward=self.reshard_after_forward, **options)
        fully_shard(model, **options)
        if on_meta_device(model):
            materialize(model, self.root_device, self.global_rank)
        if self.global_rank == 0:
            log.info(
                "fsdp: %d ranks, %d units (%s) + the root%s%s",
                mesh.size(),
                len(names),
                ", ".join(names) if len(names) <= 6 else f"{names[0]} ... {names[-1]}",
                f", {self.mixed_precision} compute" if self.mixed_precision else "",
                ", activation checkpointing" if self.activation_checkpointing else "",
            )


def reshard(model: nn.Module) -> None:
    """Every unit of `model` back to its slices (a forward without a backward leaves the root gathered)."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def on_meta_device(model: nn.Module) -> bool:
    """Whether `model` was built on the meta device and has no memory yet."""
    return any(p.is_meta for p in model.parameters())


def on_meta(cfg) -> bool:
    """Whether the run builds its model on the meta device: trainer=fsdp with trainer.strategy.meta_init=true."""
    strategy = cfg.trainer.get("strategy")
    return strategy_name(cfg.trainer) == "fsdp" and bool(strategy.get("meta_init", False))


def check_init_weights(model: nn.Module) -> None:
    """Refuse a model built on the meta device without an `init_weights()`: its weights would stay empty."""
    if not callable(getattr(model, "init_weights", None)):
        raise ConfigError(
            "trainer.strategy.meta_init",
            True,
            f"{type(model).__name__} has no init_weights(): built on the meta device, its weights exist only once "
            "sharded, as empty memory; give it an init_weights() that sets every parameter and buffer "
            "(harness.models.GPT has one), or keep meta_init=false",
        )


def materialize(model: nn.Module, device: torch.device, rank: int) -> None:
    """Memory for a meta-built model's slices (after fully_shard), then its own init_weights()."""
    ties = _tied_parameters(model)
    model.to_empty(device=device)
    for owner, name, source in ties:  # to_empty gives each use of a tied parameter a tensor of its own
        if getattr(owner, name) is not source():
            setattr(owner, name, source())
    # on GPUs, DTensor's own generator draws one weight's slices as parts of one stream, from rank 0's seed
    # on CPUs each rank draws from seed + rank: seeded alike, every slice would hold the same numbers (a CPU
    # DTensor's slices each draw from their own generator)
    offset, devices = (rank, []) if device.type == "cpu" else (0, [device])
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(torch.initial_seed() + offset)
        with torch.no_grad():
            model.init_weights()


def _tied_parameters(model: nn.Module) -> list[tuple]:
    """(module, attribute, the first use's parameter as a function) for every later use of a shared parameter."""
    first: dict[int, tuple[nn.Module, str]] = {}
    ties = []
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            if id(param) not in first:
                first[id(param)] = (module, name)
            elif first[id(param)] != (module, name):
                owner, attribute = first[id(param)]
                ties.append(
                    (module, name, lambda owner=owner, attribute=attribute: getattr(owner, attribute))
                )
    return ties
