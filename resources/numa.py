"""NUMA topology, the instance plan, ``numactl`` pinning, and checking a launched process's binding.

The ICPE'19 study ("Performance scaling of Cassandra on high-thread-count servers") scales Cassandra by running one instance
per NUMA node, bound with ``numactl --cpunodebind=N --membind=N`` and ``-XX:+UseNUMA``.

* Topology: ``/sys/devices/system/node/nodeN/{cpulist,meminfo}`` (:func:`numa_nodes`; the root is
  a parameter so tests read fake trees).
* Plan (:func:`plan_instances`): instances over the nodes that have CPUs, each bound to its whole
  node or to some CPUs of it, or not bound at all; heap and memtable space sized from the
  instance's share of its node's memory. numactl is always told the CPUs
  (``--physcpubind=<cpus> --membind=<node>``): a whole node is its CPUs that the launcher may
  use. ``--cpunodebind`` (the ICPE'19 study's form) binds the same CPUs on an unrestricted launcher, but
  it *widens* a narrowed affinity to the whole node (``taskset -c 0 numactl --cpunodebind=0``
  runs on 0-1 here) while ``--physcpubind`` refuses CPUs outside it, so the CPU list is the one
  form whose result the plan knows exactly.
* Verification (:func:`observe_binding`, :meth:`Binding.problems`): what ``/proc`` says the process
  is bound to, against the plan. :class:`asgard.resources.process.ManagedServer` does it on every launch.

Memory binding is a *memory policy* (``set_mempolicy``), not a cpuset: ``Mems_allowed_list`` in
``/proc/PID/status`` is the cpuset's node list and stays as it was under ``numactl --membind``
(Documentation/admin-guide/mm/numa_memory_policy.rst: "Memory policies should not be confused
with cpusets"). So the planned nodes must be *within* ``Mems_allowed_list``, and the policy itself
is read from ``/proc/PID/numa_maps``: a mapping without a policy of its own (the executable's
first one) shows the task's policy, e.g. ``bind:0``.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

SYS_NODES = Path("/sys/devices/system/node")

#: Heap rule of Cassandra's ``conf/cassandra-env.sh`` (``calculate_heap_sizes``, unchanged from 2.x
#: to 5.0): ``max(min(1/2 ram, 1024 MB), min(1/4 ram, 8192 MB))`` in whole MB (``free -m``, integer
#: division as ``expr`` does). Here "ram" is the instance's share of its NUMA node's ``MemTotal``.
HEAP_HALF_CAP_MIB = 1024
HEAP_QUARTER_CAP_MIB = 8192
#: ``cassandra.yaml``: "memtable_heap_space ... If omitted, Cassandra will set both [heap and
#: off-heap memtable space] to 1/4 the size of the heap."
MEMTABLE_HEAP_FRACTION = 4


class NumaError(RuntimeError):
    """Base of the NUMA errors."""


class NumaPlanError(NumaError):
    """The requested placement cannot be made on this topology (or the topology is unreadable)."""


class NumaBindingError(NumaError):
    """A launched process is not bound where its plan says."""


# --- list syntax ("0-3,8-9") ----------------------------------------------------------------
def parse_cpulist(text: str) -> tuple[int, ...]:
    """``"0-3,8-9"`` -> ``(0, 1, 2, 3, 8, 9)`` (sorted, unique); ``""`` -> ``()``. The kernel's list
    format (cpulist, ``*_allowed_list``, numa_maps node lists)."""
    ids: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-"))
                if hi < lo:
                    raise ValueError
                ids.update(range(lo, hi + 1))
            else:
                ids.add(int(part))
        except ValueError:
            raise ValueError(f"{text.strip()!r} is not a CPU/node list (e.g. 0-3,8-9): bad part {part!r}") from None
    return tuple(sorted(ids))


def format_cpulist(ids) -> str:
    """``(0, 1, 2, 3, 8, 9)`` -> ``"0-3,8-9"``."""
    ids = sorted(set(ids))
    parts: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)


# --- topology -----------------------------------------------------------------------------
@dataclass(frozen=True)
class NumaNode:
    node_id: int
    cpus: tuple[int, ...]
    mem_total_kb: int

    @property
    def mem_mib(self) -> int:
        return self.mem_total_kb // 1024  # as `free -m`, which cassandra-env.sh reads


def _mem_total_kb(meminfo: Path) -> int:
    # "Node 0 MemTotal:       17918164 kB" (node meminfo) or "MemTotal: 17918164 kB" (/proc/meminfo)
    for line in meminfo.read_text().splitlines():
        if "MemTotal:" in line:
            return int(line.split()[-2])
    return 0


def numa_nodes(root: Path = SYS_NODES) -> list[NumaNode]:
    """The NUMA nodes under ``root``, memory-only nodes (no CPUs) included. A kernel without NUMA
    shows no node directories: the real root then gives one pseudo-node with every CPU and all of
    ``/proc/meminfo``; any other root without nodes is a :class:`NumaPlanError`."""
    root = Path(root)
    nodes: list[NumaNode] = []
    for node_dir in sorted(root.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
        try:
            cpus = parse_cpulist((node_dir / "cpulist").read_text())
        except (FileNotFoundError, ValueError) as exc:
            raise NumaPlanError(f"{node_dir}/cpulist unreadable: {exc}") from exc
        meminfo = node_dir / "meminfo"
        nodes.append(NumaNode(int(node_dir.name[4:]), cpus, _mem_total_kb(meminfo) if meminfo.exists() else 0))
    if not nodes:
        if root != SYS_NODES:
            raise NumaPlanError(f"no NUMA node directories (node0, node1, ...) under {root}")
        nodes.append(NumaNode(0, tuple(sorted(os.sched_getaffinity(0))), _mem_total_kb(Path("/proc/meminfo"))))
    return nodes


# --- Cassandra sizing ----------------------------------------------------------------------
def cassandra_heap_mib(memory_mib: int) -> int:
    """Cassandra's default max heap for ``memory_mib`` of RAM (cassandra-env.sh, see the constants)."""
    half = min(memory_mib // 2, HEAP_HALF_CAP_MIB)
    quarter = min(memory_mib // 2 // 2, HEAP_QUARTER_CAP_MIB)
    return max(half, quarter)


def heap_mib(text: str) -> int:
    """A JVM heap size (``-Xmx`` syntax: ``1G``, ``512M``, ``1536m``) in MiB."""
    units = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}
    s = str(text).strip().lower().removesuffix("b").removesuffix("i")
    try:
        if s and s[-1] in units:
            value = float(s[:-1]) * units[s[-1]]
        else:
            value = int(s) / (1024 * 1024)  # bare number: bytes, as -Xmx reads it
    except ValueError:
        raise NumaPlanError(f"{text!r} is not a heap size (e.g. 1G, 512M)") from None
    if value < 1:
        raise NumaPlanError(f"heap {text!r} is below 1 MiB")
    return int(value)


# --- binding: what numactl is told, and what /proc must show -------------------------------
@dataclass(frozen=True)
class ObservedBinding:
    """A live process's binding, from ``/proc/PID``."""

    pid: int
    exe: str
    cpus: tuple[int, ...]                 # Cpus_allowed_list of the process
    mems_allowed: tuple[int, ...]         # Mems_allowed_list (the cpuset's nodes)
    policy: str                           # task memory policy: "default", "bind", "prefer", "interleave", ...
    policy_nodes: tuple[int, ...]         # its nodes ("bind:0" -> (0,)); () for "default"
    threads: int                          # threads read
    stray_threads: dict = field(default_factory=dict)  # tid -> cpus, threads allowed other CPUs than the process

    def describe(self) -> str:
        policy = self.policy + (f":{format_cpulist(self.policy_nodes)}" if self.policy_nodes else "")
        stray = f", {len(self.stray_threads)} thread(s) elsewhere" if self.stray_threads else ""
        return (f"cpus {format_cpulist(self.cpus)}, mems_allowed {format_cpulist(self.mems_allowed)}, "
                f"policy {policy} ({self.threads} threads{stray})")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["stray_threads"] = {str(k): format_cpulist(v) for k, v in self.stray_threads.items()}
        d["cpus"], d["mems_allowed"] = format_cpulist(self.cpus), format_cpulist(self.mems_allowed)
        d["policy_nodes"] = format_cpulist(self.policy_nodes)
        return d


@dataclass(frozen=True)
class Binding:
    """Where a process must run: the CPUs and memory nodes it is bound to. ``node`` set: the
    CPUs are all of that node's (that the launcher may use); else some CPUs of a node."""

    cpus: tuple[int, ...]
    mems: tuple[int, ...]
    node: int | None = None

    def __post_init__(self):
        if not self.cpus or not self.mems:
            raise NumaPlanError(f"a binding needs CPUs and memory nodes, got cpus={self.cpus} mems={self.mems}")

    def numactl_args(self) -> list[str]:
        numactl = shutil.which("numactl")
        if numactl is None:
            raise NumaPlanError("numactl is not installed: run scripts/setup.sh (apt-get install numactl)")
        return [numactl, f"--physcpubind={format_cpulist(self.cpus)}", f"--membind={format_cpulist(self.mems)}"]

    def describe(self) -> str:
        how = f"all of node {self.node}" if self.node is not None else "CPUs of a node"
        return f"cpus {format_cpulist(self.cpus)}, mems {format_cpulist(self.mems)} ({how})"

    def problems(self, seen: ObservedBinding) -> list[str]:
        """What differs between this binding and ``seen`` (empty: bound as planned)."""
        found: list[str] = []
        if set(seen.cpus) != set(self.cpus):
            found.append(f"Cpus_allowed_list is {format_cpulist(seen.cpus)}, the plan says {format_cpulist(self.cpus)}")
        for tid, cpus in sorted(seen.stray_threads.items()):
            found.append(f"thread {tid} is allowed CPUs {format_cpulist(cpus)}")
        if not set(self.mems) <= set(seen.mems_allowed):
            found.append(f"Mems_allowed_list (cpuset) is {format_cpulist(seen.mems_allowed)}: it does not "
                         f"allow the planned nodes {format_cpulist(self.mems)}")
        if seen.policy != "bind" or set(seen.policy_nodes) != set(self.mems):
            policy = seen.policy + (f":{format_cpulist(seen.policy_nodes)}" if seen.policy_nodes else "")
            found.append(f"memory policy is {policy}, the plan says bind:{format_cpulist(self.mems)}")
        return found

    def to_dict(self) -> dict:
        return {"cpus": format_cpulist(self.cpus), "mems": format_cpulist(self.mems), "node": self.node}

    @classmethod
    def from_dict(cls, d: dict) -> "Binding":
        return cls(parse_cpulist(d["cpus"]), parse_cpulist(d["mems"]), d.get("node"))


def node_binding(node_id: int, root: Path = SYS_NODES) -> Binding | None:
    """The binding of one whole node (CPUs the caller may use there); None on a one-node machine
    without numactl (binding changes nothing there)."""
    nodes = {n.node_id: n for n in numa_nodes(root)}
    if node_id not in nodes:
        raise NumaPlanError(f"NUMA node {node_id} does not exist here (nodes: {sorted(nodes)})")
    if shutil.which("numactl") is None and len(nodes) == 1:
        return None
    cpus = tuple(c for c in nodes[node_id].cpus if c in os.sched_getaffinity(0))
    if not cpus:
        raise NumaPlanError(f"NUMA node {node_id} has no CPU this process may use (memory-only node, or a cpuset)")
    return Binding(cpus, (node_id,), node=node_id)


def numactl_prefix(node_id: int | None) -> list[str]:
    """``numactl`` arguments that bind a process to one node's CPUs and memory (empty for None,
    or on a one-node machine without numactl)."""
    if node_id is None:
        return []
    binding = node_binding(node_id)
    return binding.numactl_args() if binding else []


def _status_lists(path: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    cpus = mems = None
    with open(path) as f:
        for line in f:
            if line.startswith("Cpus_allowed_list:"):
                cpus = parse_cpulist(line.split(":", 1)[1])
            elif line.startswith("Mems_allowed_list:"):
                mems = parse_cpulist(line.split(":", 1)[1])
    if cpus is None or mems is None:
        raise NumaBindingError(f"{path} has no Cpus_allowed_list/Mems_allowed_list")
    return cpus, mems


def _task_policy(pid: int) -> tuple[str, tuple[int, ...]]:
    """The task memory policy from the first line of ``numa_maps`` (``bind:0``, ``bind=static:0-1``,
    ``prefer:0``, ``interleave:0-3``, ``default``)."""
    try:
        with open(f"/proc/{pid}/numa_maps") as f:
            first = f.readline().split()
    except FileNotFoundError:  # kernel without CONFIG_NUMA: one node, nothing to bind
        return "default", ()
    if len(first) < 2:
        return "unknown", ()
    mode, _, nodes = first[1].partition(":")
    return mode.split("=")[0], parse_cpulist(nodes) if nodes else ()


def observe_binding(pid: int) -> ObservedBinding:
    """Read ``pid``'s binding from ``/proc``: its CPUs and cpuset nodes, its memory policy, and any
    thread allowed other CPUs than the process (a thread can change its own affinity)."""
    try:
        exe = os.path.realpath(f"/proc/{pid}/exe")
        cpus, mems = _status_lists(f"/proc/{pid}/status")
        policy, policy_nodes = _task_policy(pid)
        tids = os.listdir(f"/proc/{pid}/task")
    except (FileNotFoundError, ProcessLookupError) as exc:
        raise NumaBindingError(f"process {pid} is gone: {exc}") from exc
    stray: dict[int, tuple[int, ...]] = {}
    read = 0
    for tid in tids:
        try:
            thread_cpus, _ = _status_lists(f"/proc/{pid}/task/{tid}/status")
        except (FileNotFoundError, ProcessLookupError):
            continue  # exited between listing and reading
        read += 1
        if thread_cpus != cpus:
            stray[int(tid)] = thread_cpus
    return ObservedBinding(pid, exe, cpus, mems, policy, policy_nodes, read, stray)


# --- the plan ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class InstancePlan:
    """Where instance ``index`` (0-based) runs and how big it is.

    ``memory_mib`` is its share of memory: its node's ``MemTotal`` split evenly among the
    instances on that node (all nodes' memory among all instances, unpinned). Assumption: the
    instances are the node's main tenants; nothing is set aside for other processes beyond what
    Cassandra's own rule leaves (it takes at most half of small and a quarter of large memory).
    """

    index: int
    node: int | None              # the node it is placed on (None: unpinned)
    cpus: tuple[int, ...]
    mems: tuple[int, ...]
    memory_mib: int
    heap_rule_mib: int            # cassandra-env.sh's rule on memory_mib
    heap_mib: int                 # what the JVM gets (-Xms = -Xmx)
    heap_source: str              # "rule", or "set" (an explicit heap)
    memtable_mib: int             # memtable_heap_space (and Cassandra's off-heap default): heap / 4
    binding: Binding | None       # None: not pinned

    @property
    def over_share(self) -> bool:
        """An explicit heap larger than the instance's memory share: allowed (the operator's
        call, and memory is not a hard partition), but said wherever the plan is shown."""
        return self.heap_mib > self.memory_mib

    @property
    def heap(self) -> str:
        return f"{self.heap_mib}M"

    def describe(self) -> str:
        where = self.binding.describe() if self.binding else f"unpinned (cpus {format_cpulist(self.cpus)})"
        source = (f"rule: max(min(1/2, 1 GiB), min(1/4, 8 GiB)) of {self.memory_mib} MiB"
                  if self.heap_source == "rule" else f"set; the rule gives {self.heap_rule_mib} MiB")
        if self.over_share:
            source += f"; OVER its memory share of {self.memory_mib} MiB"
        return f"{where}; heap {self.heap_mib} MiB ({source}); memtable space {self.memtable_mib} MiB (heap/4)"

    def to_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k != "binding"}
        d["cpus"], d["mems"] = format_cpulist(self.cpus), format_cpulist(self.mems)
        d["binding"] = self.binding.to_dict() if self.binding else None
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "InstancePlan":
        d = dict(d)
        d["cpus"], d["mems"] = parse_cpulist(d["cpus"]), parse_cpulist(d["mems"])
        d["binding"] = Binding.from_dict(d["binding"]) if d.get("binding") else None
        return cls(**d)


def plan_instances(
    instances: int | None = None,
    *,
    root: Path = SYS_NODES,
    pin: bool = True,
    cpus_per_instance: int | None = None,
    cpu_sets: list | None = None,
    heap: str | int | None = None,
    allowed_cpus=None,
) -> list[InstancePlan]:
    """Plan ``instances`` Cassandra instances (default: one per node that has CPUs).

    Instance ``i`` goes to node ``i mod nodes`` (nodes with CPUs, in id order). ``pin=False``: no
    binding, every instance shares the machine. Otherwise each is bound to its node
    (its CPUs and memory), or with ``cpus_per_instance=k`` to ``k`` CPUs of its node
    (the ``j``-th instance on a node gets the ``j``-th ``k`` of the node's CPU list), or with
    ``cpu_sets`` to exactly those CPUs each (the node is the one holding them). ``heap``: an
    explicit heap (``"1G"`` or MiB) instead of the rule. ``allowed_cpus``: the CPUs the launcher
    may use (``os.sched_getaffinity(0)`` for a real launch: numactl refuses others); None: all.

    Raises :class:`NumaPlanError` for what cannot be placed: no node with CPUs, a node without
    ``MemTotal``, more instances on a node than it has CPUs, CPU sets that are empty, overlap,
    span nodes, or name CPUs that do not exist or the launcher may not use. (An explicit heap
    over the memory share is planned and flagged: :attr:`InstancePlan.over_share`.)
    """
    nodes = numa_nodes(root)
    allowed = None if allowed_cpus is None else set(allowed_cpus)

    def usable_cpus(node: NumaNode) -> tuple[int, ...]:
        return tuple(c for c in node.cpus if allowed is None or c in allowed)

    placeable = [n for n in nodes if usable_cpus(n)]  # memory-only nodes hold no instance
    if not placeable:
        raise NumaPlanError(f"no NUMA node under {root} has a CPU to run on "
                            f"(nodes: {[(n.node_id, format_cpulist(n.cpus)) for n in nodes]})")
    for n in placeable:
        if n.mem_total_kb <= 0:
            raise NumaPlanError(f"node {n.node_id} has CPUs but no MemTotal in {root}/node{n.node_id}/meminfo: "
                                "its instances' heap cannot be sized")
    explicit_heap = None if heap is None else (heap if isinstance(heap, int) else heap_mib(heap))
    if cpu_sets is not None and cpus_per_instance is not None:
        raise NumaPlanError("give cpu_sets or cpus_per_instance, not both")
    if cpu_sets is not None and not pin:
        raise NumaPlanError("cpu_sets pin instances: pin=False contradicts them")

    # (node, cpus) of each instance
    slots: list[tuple[NumaNode | None, tuple[int, ...]]] = []
    if cpu_sets is not None:
        if instances is not None and instances != len(cpu_sets):
            raise NumaPlanError(f"{instances} instances but {len(cpu_sets)} CPU sets")
        owner = {c: n for n in nodes for c in n.cpus}
        taken: dict[int, int] = {}
        for i, raw in enumerate(cpu_sets):
            cpus = parse_cpulist(raw) if isinstance(raw, str) else tuple(sorted(set(raw)))
            if not cpus:
                raise NumaPlanError(f"instance {i}: empty CPU set")
            unknown = [c for c in cpus if c not in owner]
            if unknown:
                raise NumaPlanError(f"instance {i}: CPU(s) {format_cpulist(unknown)} do not exist "
                                    f"(nodes have {format_cpulist(owner)})")
            barred = [c for c in cpus if allowed is not None and c not in allowed]
            if barred:
                raise NumaPlanError(f"instance {i}: CPU(s) {format_cpulist(barred)} are outside the allowed "
                                    f"{format_cpulist(allowed)}")
            homes = {owner[c].node_id for c in cpus}
            if len(homes) > 1:
                raise NumaPlanError(f"instance {i}: CPUs {format_cpulist(cpus)} span nodes {sorted(homes)}; "
                                    "pin an instance within one node (its memory is bound there)")
            shared = sorted(c for c in cpus if c in taken)
            if shared:
                raise NumaPlanError(f"instance {i}: CPU(s) {format_cpulist(shared)} already pin instance "
                                    f"{taken[shared[0]]}; pinned instances get CPUs of their own")
            taken.update({c: i for c in cpus})
            slots.append((owner[cpus[0]], cpus))
    else:
        count = len(placeable) if instances is None else instances
        if count < 1:
            raise NumaPlanError(f"instances must be at least 1, got {count}")
        if cpus_per_instance is not None and cpus_per_instance < 1:
            raise NumaPlanError(f"cpus_per_instance must be at least 1, got {cpus_per_instance}")
        on_node: dict[int, int] = {}
        for i in range(count):
            node = placeable[i % len(placeable)]
            j = on_node.get(node.node_id, 0)
            on_node[node.node_id] = j + 1
            cpus = usable_cpus(node)
            if not pin:
                slots.append((None, ()))
                continue
            if cpus_per_instance is None:
                if j >= len(cpus):
                    raise NumaPlanError(f"{count} instances put {j + 1} on node {node.node_id}, which has only "
                                        f"{len(cpus)} CPU(s) ({format_cpulist(cpus)}): more instances than CPUs")
                slots.append((node, cpus))
            else:
                group = cpus[j * cpus_per_instance:(j + 1) * cpus_per_instance]
                if len(group) < cpus_per_instance:
                    raise NumaPlanError(f"node {node.node_id} has {len(cpus)} CPU(s) ({format_cpulist(cpus)}): "
                                        f"{on_node[node.node_id]} instances x {cpus_per_instance} CPU(s) do not fit")
                slots.append((node, group))

    per_node: dict[int | None, int] = {}
    for node, _ in slots:
        key = node.node_id if node is not None else None
        per_node[key] = per_node.get(key, 0) + 1
    all_cpus = tuple(sorted({c for n in placeable for c in usable_cpus(n)}))
    all_mems = tuple(n.node_id for n in nodes if n.mem_total_kb > 0)
    plans: list[InstancePlan] = []
    for i, (node, cpus) in enumerate(slots):
        if node is None:
            memory = sum(n.mem_mib for n in nodes) // len(slots)
            binding, cpus, mems = None, all_cpus, all_mems
        else:
            memory = node.mem_mib // per_node[node.node_id]
            mems = (node.node_id,)
            whole_node = cpu_sets is None and cpus_per_instance is None
            binding = Binding(cpus, mems, node=node.node_id if whole_node else None)
        rule = cassandra_heap_mib(memory)
        chosen = explicit_heap if explicit_heap is not None else rule
        plans.append(InstancePlan(
            index=i, node=None if node is None else node.node_id, cpus=cpus, mems=mems, memory_mib=memory,
            heap_rule_mib=rule, heap_mib=chosen, heap_source="rule" if explicit_heap is None else "set",
            memtable_mib=chosen // MEMTABLE_HEAP_FRACTION, binding=binding))
    return plans


def local_plan(instances: int | None = None, **kwargs) -> list[InstancePlan]:
    """:func:`plan_instances` on this machine, within the CPUs this process may use."""
    kwargs.setdefault("allowed_cpus", os.sched_getaffinity(0))
    return plan_instances(instances, **kwargs)
