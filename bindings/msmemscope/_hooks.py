"""``init_framework_hooks`` / ``cleanup_framework_hooks`` (upstream's names
and arguments): wrap a framework's functions so that memory allocated inside
them is labelled (hook type "decompose": an owner label, as
``describe.describer``) or so that a snapshot is taken around them (hook type
"snapshot": SNAPSHOT rows "<module>@<class>@<function>@Start" / "@End").

The table says, per framework, version range and component, which functions
are wrapped. Upstream's entries are kept (vllm_ascend, verl, mindspeed_llm,
pytorch fsdp1/fsdp2); what can be hooked here is what is installed.
Functions are wrapped by replacing the attribute on their module or class;
cleanup puts the originals back.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
from typing import Any, Callable, Dict, List, Optional, Tuple

__all__ = ["init_framework_hooks", "cleanup_framework_hooks"]

HOOK_TYPES = ("decompose", "snapshot")

# (module, class or "", function, owner label for decompose)
Entry = Tuple[str, str, str, str]

_FSDP1 = "torch.distributed.fsdp"
_FSDP2 = "torch.distributed.fsdp._fully_shard"
_VLLM = "vllm_ascend.worker"

# framework -> (python package, version key -> component -> entries)
TABLE: Dict[str, Tuple[str, Dict[str, Dict[str, List[Entry]]]]] = {
    "pytorch": ("torch", {
        "1.13+": {
            "autograd": [
                ("torch.autograd", "", "backward", "pytorch@backward"),
                ("torch.autograd", "", "grad", "pytorch@backward"),
            ],
            "optimizer": [
                ("torch.optim.optimizer", "Optimizer", "zero_grad", "pytorch@optimizer"),
            ],
        },
        "2.6+": {
            "fsdp1": [
                (f"{_FSDP1}.fully_sharded_data_parallel", "FullyShardedDataParallel", "forward", "fsdp1@activation"),
                (f"{_FSDP1}._runtime_utils", "", "_pre_backward_hook", "fsdp1@backward"),
                (f"{_FSDP1}._runtime_utils", "", "_post_backward_hook", "fsdp1@backward"),
                (f"{_FSDP1}._flat_param", "FlatParamHandle", "_init_flat_param_and_metadata",
                 "fsdp1@sharded_weight"),
                (f"{_FSDP1}._flat_param", "FlatParamHandle", "_alloc_padded_unsharded_flat_param",
                 "fsdp1@all_gather"),
            ],
        },
        "2.10+": {
            "fsdp2": [
                (f"{_FSDP2}._fsdp_state", "FSDPState", "_pre_forward", "fsdp2@activation"),
                (f"{_FSDP2}._fsdp_state", "FSDPState", "_pre_backward", "fsdp2@backward"),
                (f"{_FSDP2}._fsdp_param_group", "FSDPParamGroup", "post_backward", "fsdp2@backward"),
                (f"{_FSDP2}._fsdp_param", "FSDPParam", "_init_sharded_param", "fsdp2@sharded_weight"),
                (f"{_FSDP2}._fsdp_collectives", "DefaultAllGather", "allocate", "fsdp2@all_gather_output"),
                (f"{_FSDP2}._fsdp_collectives", "DefaultReduceScatter", "allocate", "fsdp2@gradient"),
            ],
        },
    }),
    "vllm_ascend": ("vllm_ascend", {
        "11.0": {
            "worker": [
                (f"{_VLLM}.model_runner_v1", "NPUModelRunner", "load_model", "vllm@weights"),
                (f"{_VLLM}.model_runner_v1", "NPUModelRunner", "profile_run", "vllm@profile"),
                (f"{_VLLM}.model_runner_v1", "NPUModelRunner", "initialize_kv_cache", "vllm@kv_cache"),
                (f"{_VLLM}.model_runner_v1", "NPUModelRunner", "execute_model", "vllm@serve"),
                (f"{_VLLM}.worker", "NPUWorker", "compile_or_warm_up_model", "vllm@warmup"),
                (f"{_VLLM}.model_runner_v1", "NPUModelRunner", "capture_model", "vllm@graph_pool"),
            ],
        },
    }),
    "verl": ("verl", {
        "0.7.0": {
            "TaskRunner": [
                ("verl.trainer.main_ppo", "TaskRunner", m, "verl@" + m)
                for m in ("add_actor_rollout_worker", "add_critic_worker", "add_reward_model_worker",
                          "add_ref_policy_worker", "run")
            ],
        },
    }),
    "mindspeed_llm": ("mindspeed_llm", {
        "0.12.1": {
            "training": [
                ("mindspeed_llm.training.training", "", "train", "mindspeed_llm@train"),
                ("mindspeed_llm.training.training", "", "train_step", "mindspeed_llm@train_step"),
                ("megatron.training.training", "", "setup_model_and_optimizer", "megatron@setup"),
                ("megatron.training.training", "", "get_model", "megatron@model"),
            ],
        },
    }),
}

# (module or class, attribute, original raw attribute, whether it was the owner's own attribute)
_installed: List[Tuple[Any, str, Any, bool]] = []


def _parse_version(v: str) -> Tuple[int, ...]:
    parts = []
    for seg in v.split(".")[:3]:
        digits = ""
        for ch in seg:
            if not ch.isdigit():
                break
            digits += ch
        parts.append(int(digits) if digits else 0)
    return tuple(parts + [0] * (3 - len(parts)))


def _matches(version: str, key: str) -> bool:
    if key.endswith("+"):
        return _parse_version(version) >= _parse_version(key[:-1])
    return _parse_version(version) == _parse_version(key)


def _installed_frameworks() -> List[str]:
    return [f for f, (pkg, _) in TABLE.items() if importlib.util.find_spec(pkg) is not None]


def _entries(framework: str, version: str, component: str, hook_type: str) -> List[Entry]:
    api = "msmemscope.init_framework_hooks"
    for name, value in (("framework", framework), ("version", version), ("component", component),
                        ("hook_type", hook_type)):
        if not isinstance(value, str):
            raise TypeError(f"{api}: '{name}' must be a string, got {type(value).__name__}")
    here = _installed_frameworks()
    if framework not in TABLE:
        raise ValueError(f"{api}: unknown framework '{framework}' (supported: {', '.join(TABLE)}; installed "
                         f"here: {', '.join(here) or 'none'})")
    package, versions = TABLE[framework]
    if framework not in here:
        raise ModuleNotFoundError(f"{api}: framework '{framework}' is not installed here (no Python package "
                                  f"'{package}'); installed and supported: {', '.join(here) or 'none'}")
    keys = [k for k in versions if _matches(version, k)]
    if not keys:
        raise ValueError(f"{api}: framework '{framework}' has no hooks for version '{version}' (supported "
                         f"versions: {', '.join(versions)})")
    components = {c: e for k in keys for c, e in versions[k].items()}
    if component not in components:
        raise ValueError(f"{api}: framework '{framework}' version '{version}' has no component '{component}' "
                         f"(supported: {', '.join(sorted(components))})")
    if hook_type not in HOOK_TYPES:
        raise ValueError(f"{api}: invalid hook_type '{hook_type}' (supported: {', '.join(HOOK_TYPES)})")
    return components[component]


def _resolve(framework: str, entry: Entry) -> Tuple[Any, str, Any]:
    module_name, cls_name, func_name, _ = entry
    where = ".".join(p for p in (module_name, cls_name, func_name) if p)
    try:
        owner: Any = importlib.import_module(module_name)
        if cls_name:
            owner = getattr(owner, cls_name)
        raw = owner.__dict__[func_name] if cls_name and func_name in owner.__dict__ else getattr(owner, func_name)
    except (ImportError, AttributeError, KeyError, ValueError) as e:
        package = TABLE[framework][0]
        mod = importlib.import_module(package) if importlib.util.find_spec(package) else None
        have = getattr(mod, "__version__", "unknown") if mod else "none"
        raise RuntimeError(f"msmemscope.init_framework_hooks: cannot hook {where} in the installed {framework} "
                           f"(version {have}): {type(e).__name__}: {e}") from None
    return owner, func_name, raw


def _wrap(func: Callable, hook_type: str, label: str, ident: str) -> Callable:
    from . import _api, describe

    if hook_type == "decompose":
        @functools.wraps(func)
        def hooked(*args, **kwargs):
            with describe.Describer(label):
                return func(*args, **kwargs)
    else:
        @functools.wraps(func)
        def hooked(*args, **kwargs):
            _api.take_snapshot(name=ident + "@Start")
            try:
                return func(*args, **kwargs)
            finally:
                _api.take_snapshot(name=ident + "@End")
    hooked.__msmemscope_original__ = func
    return hooked


def init_framework_hooks(framework: str, version: str, component: str, hook_type: str) -> None:
    """Wraps the functions of ``framework`` (its ``version``'s ``component``)
    for ``hook_type`` "decompose" (memory allocated inside gets an owner
    label) or "snapshot" (SNAPSHOT rows before and after each call).

    Raises ModuleNotFoundError for a framework that is not installed (naming
    those that are), ValueError for an unknown framework, version, component
    or hook type (naming the supported ones), RuntimeError when a function of
    the table is missing from the installed version. Nothing is wrapped
    unless every function can be."""
    entries = _entries(framework, version, component, hook_type)
    resolved = [(_resolve(framework, e), e) for e in entries]
    for (owner, attr, raw), (module_name, cls_name, func_name, label) in resolved:
        ident = f"{module_name}@{cls_name}@{func_name}"
        if isinstance(raw, (staticmethod, classmethod)):
            new: Any = type(raw)(_wrap(raw.__func__, hook_type, label, ident))
        else:
            new = _wrap(raw, hook_type, label, ident)
        own = not isinstance(owner, type) or attr in owner.__dict__
        setattr(owner, attr, new)
        _installed.append((owner, attr, raw, own))
    print(f"[msmemscope] Info: Hijack functions registered successfully for framework '{framework}', "
          f"version '{version}', component {component}, hook type {hook_type}")


def cleanup_framework_hooks() -> None:
    """Puts back every function init_framework_hooks wrapped."""
    if not _installed:
        print("[msmemscope] Info: No registered hijack handlers, nothing to release")
        return
    while _installed:
        owner, attr, raw, own = _installed.pop()
        if own:
            setattr(owner, attr, raw)
        else:
            delattr(owner, attr)
    print("[msmemscope] Info: All hijack function handlers have been released")


def enable_npu_sanitizer() -> None:
    """Upstream's NPU sanitizer link (torch_npu's ``_sanitizer``): needs
    torch_npu, which is not here; without it this is an error."""
    if importlib.util.find_spec("torch_npu") is None:
        raise ModuleNotFoundError("msmemscope.enable_npu_sanitizer: needs torch_npu (the NPU sanitizer is part "
                                  "of torch_npu, which is not installed)")
    raise NotImplementedError("msmemscope.enable_npu_sanitizer: the NPU sanitizer link (mstx "
                              "'sanitizer-op:' marks turned into kernel launches) is not implemented by this "
                              "msmemscope")
