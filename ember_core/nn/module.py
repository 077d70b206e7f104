"""``Module``: a tree of layers holding parameters and buffers, with PyTorch's familiar surface
(parameters, named_parameters, children, train/eval, state_dict/load_state_dict, to), plus the
containers ``Sequential`` and ``ModuleList``."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

import ember_core as em
from ember_core.autograd import no_grad
from ember_core.errors import ShapeError
from ember_core.nn.parameter import Parameter
from ember_core.tensor import Tensor


class IncompatibleKeys(NamedTuple):
    missing_keys: list[str]
    unexpected_keys: list[str]


class Module:
    """Base class of every layer: assign Parameters, buffers and sub-modules as attributes."""

    training: bool

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    # ---- attributes: parameters, buffers and children are kept in their own tables ----------------
    def __setattr__(self, name: str, value: Any) -> None:
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__}.__init__ must call super().__init__() before "
                                 f"assigning attributes")
        tables = (self._parameters, self._buffers, self._modules)
        if isinstance(value, Parameter):
            target = self._parameters
        elif isinstance(value, Module):
            target = self._modules
        elif name in self._parameters and value is None:
            target = self._parameters
        elif name in self._buffers and (value is None or isinstance(value, Tensor)):
            target = self._buffers
        elif name in self._parameters:
            raise TypeError(f"cannot assign a {type(value).__name__} to parameter {name!r}: wrap it in "
                            f"ember_core.nn.Parameter, or del the parameter first")
        else:
            for table in tables:
                table.pop(name, None)
            object.__setattr__(self, name, value)
            return
        for table in tables:
            if table is not target:
                table.pop(name, None)
        self.__dict__.pop(name, None)
        target[name] = value

    def __getattr__(self, name: str) -> Any:
        for table in ("_parameters", "_buffers", "_modules"):
            entries = self.__dict__.get(table)
            if entries is not None and name in entries:
                return entries[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        for table in (self._parameters, self._buffers, self._modules):
            if name in table:
                del table[name]
                self._non_persistent.discard(name)
                return
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"register_parameter({name!r}) needs a Parameter or None, got {type(param).__name__}")
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """State that is not learned (running statistics); saved in state_dict when persistent."""
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"register_buffer({name!r}) needs an ember tensor or None, got {type(tensor).__name__}")
        self._buffers[name] = tensor
        (self._non_persistent.discard if persistent else self._non_persistent.add)(name)

    def add_module(self, name: str, module: Module | None) -> None:
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module({name!r}) needs a Module, got {type(module).__name__}")
        self._modules[name] = module

    # ---- running -----------------------------------------------------------------------------------
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def train(self, mode: bool = True) -> Module:
        """Training behaviour (dropout active, batch statistics) for this module and its children."""
        for module in self.modules():
            object.__setattr__(module, "training", bool(mode))
        return self

    def eval(self) -> Module:
        return self.train(False)

    # ---- walking the tree ----------------------------------------------------------------------------
    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        seen: set[int] = set()
        stack = [(prefix, self)]
        while stack:
            name, module = stack.pop()
            if id(module) in seen:
                continue
            seen.add(id(module))
            yield name, module
            children = [(f"{name}.{n}" if name else n, m) for n, m in module._modules.items() if m is not None]
            stack.extend(reversed(children))

    def modules(self) -> Iterator[Module]:
        return (m for _, m in self.named_modules())

    def named_children(self) -> Iterator[tuple[str, Module]]:
        return ((n, m) for n, m in self._modules.items() if m is not None)

    def children(self) -> Iterator[Module]:
        return (m for _, m in self.named_children())

    def _named(self, table: str, prefix: str, recurse: bool) -> Iterator[tuple[str, Any]]:
        seen: set[int] = set()
        modules = self.named_modules(prefix) if recurse else iter([(prefix, self)])
        for module_name, module in modules:
            for name, value in getattr(module, table).items():
                if value is None or id(value) in seen:
                    continue
                seen.add(id(value))
                yield (f"{module_name}.{name}" if module_name else name), value

    def named_parameters(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Parameter]]:
        """Each parameter once (shared ones under their first name)."""
        return self._named("_parameters", prefix, recurse)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        return (p for _, p in self.named_parameters(recurse=recurse))

    def named_buffers(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Tensor]]:
        return self._named("_buffers", prefix, recurse)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        return (b for _, b in self.named_buffers(recurse=recurse))

    def apply(self, fn: Callable[[Module], Any]) -> Module:
        for module in reversed(list(self.modules())):  # children first, as in PyTorch
            fn(module)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters():
            _clear_grad(p, set_to_none)

    # ---- saving and loading --------------------------------------------------------------------------
    def state_dict(self) -> OrderedDict[str, Tensor]:
        """Parameters and persistent buffers by dotted name, detached from the graph."""
        state: OrderedDict[str, Tensor] = OrderedDict()
        for module_name, module in self.named_modules():
            prefix = f"{module_name}." if module_name else ""
            for name, p in module._parameters.items():
                if p is not None:
                    state[prefix + name] = p.detach()
            for name, b in module._buffers.items():
                if b is not None and name not in module._non_persistent:
                    state[prefix + name] = b.detach()
        return state

    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True) -> IncompatibleKeys:
        """Copy values into the existing parameters and buffers (their identity is kept, so an
        optimizer built on them stays valid); shapes must match exactly."""
        own = self.state_dict()
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        if strict and (missing or unexpected):
            raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected} "
                           f"(pass strict=False to load the matching ones)")
        with no_grad():
            for name, target in own.items():
                if name not in state_dict:
                    continue
                value = state_dict[name]
                value = value if isinstance(value, Tensor) else em.asarray(value)
                if value.shape != target.shape:
                    raise ShapeError(f"load_state_dict: {name} has shape {target.shape} here but {value.shape} "
                                     f"in the state dict")
                target[...] = value.to_device(target.device)
        return IncompatibleKeys(missing, unexpected)

    # ---- moving ------------------------------------------------------------------------------------
    def to(self, *args: Any, device: Any = None, dtype: Any = None) -> Module:
        """``module.to('cuda')``, ``module.to(ember_core.float64)``, ``module.to(device, dtype)``.

        Floating parameters and buffers are converted (integer buffers keep their dtype).  The
        parameters are new Parameter objects: build optimizers after moving the module."""
        for arg in args:
            if isinstance(arg, em.DType) or (isinstance(arg, str) and _is_dtype_name(arg)):
                dtype = arg
            else:
                device = arg

        def convert(t: Tensor) -> Tensor:
            wanted = dtype if dtype is not None and t.dtype.kind in "fc" else None
            return t.to(device=device, dtype=wanted)

        for module in self.modules():
            for name, p in module._parameters.items():
                if p is not None:
                    moved = convert(p)
                    if moved is not p:
                        module._parameters[name] = Parameter(moved, requires_grad=p.requires_grad)
            for name, b in module._buffers.items():
                if b is not None:
                    module._buffers[name] = convert(b)
        return self

    # ---- printing ------------------------------------------------------------------------------------
    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"({name}): " + repr(m).replace("\n", "\n  ") for name, m in self._modules.items()]
        head = f"{type(self).__name__}({self.extra_repr()}"
        if not lines:
            return head + ")"
        return head + "\n  " + "\n  ".join(lines) + "\n)"


def _is_dtype_name(name: str) -> bool:
    try:
        em.dtypes.as_dtype(name)
    except (TypeError, ValueError, KeyError):
        return False
    return True


def _clear_grad(p: Tensor, set_to_none: bool) -> None:
    if set_to_none or p.grad is None:
        p.grad = None
    else:
        p.grad = em.zeros_like(p.grad)


# Layers that can run a following activation inside their own op (a backend may fuse the pair into
# one kernel): exact layer type -> forward(layer, x, activation); exact activation type -> its name.
# Filled by ember_core.nn.layers.  Subclasses are never fused: they may override forward.
FUSED_FORWARD: dict[type, Callable[[Any, Any, str], Any]] = {}
FUSABLE_ACTIVATIONS: dict[type, str] = {}


class Sequential(Module):
    """Runs its modules in order, each on the previous one's output.  A Linear or Conv2d directly
    followed by a ReLU runs as one op with a fused activation (same result, one call fewer)."""

    def __init__(self, *modules: Module | OrderedDict[str, Module]) -> None:
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            for name, module in modules[0].items():
                self.add_module(name, module)
        else:
            for i, module in enumerate(modules):
                self.add_module(str(i), module)  # type: ignore[arg-type]

    def forward(self, x: Any) -> Any:
        modules = list(self._modules.values())
        i = 0
        while i < len(modules):
            fused = FUSED_FORWARD.get(type(modules[i]))
            activation = FUSABLE_ACTIVATIONS.get(type(modules[i + 1])) if i + 1 < len(modules) else None
            if fused is not None and activation is not None:
                x = fused(modules[i], x, activation)
                i += 2
            else:
                x = modules[i](x)
                i += 1
        return x

    def append(self, module: Module) -> Sequential:
        self.add_module(str(len(self._modules)), module)
        return self

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __getitem__(self, index: int | slice) -> Any:
        items = list(self._modules.items())
        if isinstance(index, slice):
            return Sequential(OrderedDict(items[index]))
        return items[index][1]


class ModuleList(Module):
    """A list of modules whose parameters belong to the owner (it has no forward of its own)."""

    def __init__(self, modules: Iterable[Module] = ()) -> None:
        super().__init__()
        self.extend(modules)

    def append(self, module: Module) -> ModuleList:
        self.add_module(str(len(self._modules)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        for module in modules:
            self.append(module)
        return self

    def insert(self, index: int, module: Module) -> None:
        items = list(self._modules.values())
        items.insert(index, module)
        self._modules.clear()
        self.extend(items)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __getitem__(self, index: int | slice) -> Any:
        items = list(self._modules.values())
        return ModuleList(items[index]) if isinstance(index, slice) else items[index]

    def __setitem__(self, index: int, module: Module) -> None:
        name = list(self._modules)[index]
        self.add_module(name, module)
