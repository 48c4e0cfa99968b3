"""Who holds it: for each group of live device blocks, the Python objects that keep them alive, named as
a user names them ("list `kept` (global in train.py)", "a closure of `make_hook` (cell `cache`)").
Runs at report time only; never calls the allocator; standard library only (torch only if imported).

Note [Who holds it]
1. Exposing objects: one pass over gc.get_objects(), each type asked once how it shows device memory
   (torch storage, __cuda_array_interface__, __dlpack__), the address bisected into the blocks.
2. Holders: breadth first upwards to roots (module globals, the program's globals, frames), one heap
   scan per level. gc.get_referrers costs about 25 ms per million objects plus 0.7 ms per target per
   million (each reference is compared with each target); above WIDE_LEVEL targets one Python pass
   (about 0.3 s per million) is cheaper.
3. Words: the shortest path from a root, as an expression (`trainer.buffers['w']`) and as the container
   that holds the object, named from its root. Then an exposing tensor's autograd graph, for saved tensors.

Note [Paths found late]: a level follows only what lies under an exposing object still without a root;
the rest waits in `pending`, not dropped. A model's layer is reached first from its weights, which the
optimizer's globals name at once, so the layer waits; a forward hook's closure reached later ends at that
layer, which is then followed (seen on the H200: dropped, the hook's outputs had "no Python root").

Note [Own objects]: each container of found objects that the search makes is kept in `owned` to the end
and its id put in `own`, so that the search never names itself; `nodes` keeps every found object alive,
so that no id is reused by another object while the search runs.

Note [Bounded search]: the program's code that the search runs (__cuda_array_interface__, __dlpack__,
attributes) may block (a lock the reporting thread holds, a hung device) or raise anything, SystemExit too:
that object is skipped, or the search ends with a note, never the report. It runs on a daemon thread
(_bounded.py; its frames are not roots) while the reporting thread waits, holding neither the GIL nor an
allocator lock, ABANDON_AFTER_S past the budget at most; the report then takes what the search published
last, a fresh dict put in `outcome` in one step, and the search stops at its next deadline check. The
next report waits for a search left behind within its own budget, and skips its own search if that one
still runs: code that blocks for good holds one thread, not one a report.
"""

from __future__ import annotations

import bisect
import collections
import gc
import os
import sys
import threading
import time
import types

from . import _exposing as exposing
from ._bounded import StillRunning, describe, run_bounded
from ._frame_roots import frame_locals, frame_scope, is_own_frame

MAX_LEVELS = 24  # a holder further than this from every root is not named (the note says so)
WIDE_LEVEL = 300  # above this many targets a Python pass over the heap beats gc.get_referrers
GRAPH_DEPTH_SHOWN = 4  # deeper autograd nodes are named by their type, not by their full path
NO_ROOT = "no Python root reaches it (a reference cycle awaiting gc, or native code holds it)"
ABANDON_AFTER_S = 1.0  # past the budget: longer than a search's last steps take, shorter than a user waits
_TRANSPARENT = ("attrdict", "closure")  # steps that name nothing: an object's __dict__, a __closure__ tuple
_POSITIONAL = ("index", "set")  # a holder is named above these: `history` for `history[3][0]`


def find_holders(blocks, program_globals=None, program_name=None, budget_s=2.0, max_holders=3):
    """blocks: iterable of (address:int, size:int, key) — live device blocks; key is opaque (hashable), the
    group each block belongs to. program_globals: a dict to treat as the globals of the user's main script
    (python -m tracepool run keeps a copy of the script's globals after runpy returns; also treat it as a root),
    program_name: its file's base name ("train.py").
    Returns a dict:
      {"held_by": {key: [{"holder": str, "bytes": int, "blocks": int, "example": str}, ...]},
                              # per key, bytes descending, at most max_holders entries
       "objects": int,        # Python objects examined (len of gc.get_objects())
       "exposing": int,       # objects found that expose one of the blocks
       "seconds": float,      # wall time taken
       "complete": bool,      # False when cut short by budget_s (or by MAX_LEVELS)
       "note": str | None,    # why cut short / what was skipped, in one sentence, else None
       "levels": int}         # heap scans made going upwards (for benchmarks)
    An exposing object that no root reaches once every path up has been followed is held by NO_ROOT;
    one whose search was cut short is left out, as are blocks that no object exposes. Back by budget_s +
    ABANDON_AFTER_S whatever the program's code does (Note [Bounded search]).
    """
    started = time.perf_counter()
    outcome = {"found": dict(held_by={}, complete=False, note=None, objects=0, exposing=0, levels=0),
               "doing": "looking for objects that expose the blocks"}
    try:
        search = _Search(blocks, program_globals, program_name, started, budget_s, max_holders, outcome)
        finished = run_bounded(search.run_and_publish, search.deadline + ABANDON_AFTER_S)
    except StillRunning:
        outcome["found"]["note"] = ("holder search skipped: the one an earlier report left behind is still in code "
                                    "of the program's that did not return")
    except BaseException as e:  # a bug here, or a key's own code, must not break the report
        outcome["found"]["note"] = "holder search failed: %s" % describe(e)
    else:
        if not finished and outcome["doing"]:
            note = "time budget of %g s spent while %s: code of the program's that the search called did not return"
            outcome["found"] = dict(outcome["found"], complete=False, note=note % (budget_s, outcome["doing"]))
    return dict(outcome["found"], seconds=time.perf_counter() - started)


def _module_label(name, module):
    file = getattr(module, "__file__", None)
    base = os.path.basename(file) if isinstance(file, str) else ""
    return base if base and base != "__init__.py" else name


def _in(scope, nested):
    """Where a root is: "train.py", "main (train.py:40)", or "main, train.py:40" inside parentheses."""
    _, name, location = scope
    if location is None:
        return name
    return "%s, %s" % (name, location) if nested else "%s (%s)" % (name, location)


def _root_phrase(scope, nested):
    kind, name, _ = scope
    return "the globals of %s" % name if kind == "global" else "the frame of %s" % _in(scope, nested)


def _key_text(key):
    """A dict key as a path shows it: the repr of a plain value, cut at 40 characters; anything else by its
    type (a tensor's repr is many lines, and an object's repr runs its own code)."""
    if key is None or isinstance(key, (str, bytes, int, float, bool)) or (
            isinstance(key, tuple) and all(k is None or isinstance(k, (str, bytes, int, float, bool)) for k in key)):
        text = repr(key)
        return text if len(text) <= 40 else text[:37] + "..."
    return "<a `%s`>" % type(key).__name__


def _what(obj):
    if isinstance(obj, type):
        return "class `%s`" % obj.__qualname__
    if isinstance(obj, types.FunctionType):
        return "function `%s`" % obj.__qualname__
    return "a `%s`" % type(obj).__qualname__


# How a found object is reached from its root: `expr` names it in Python (`trainer.buffers['w']`), `edge`
# is the kind of the last step and `step` its text, `owner` the id of the object before that step (an
# instance's __dict__ and a function's __closure__ tuple are skipped), `scope` the root's (kind, name,
# location), `origin` the root's variable in words, `detail` a closure's (function id, cell name).
_Place = collections.namedtuple("_Place", "expr edge step owner scope origin detail depth")


class _Search:
    def __init__(self, blocks, program_globals, program_name, started, budget_s, max_holders, outcome):
        blocks = sorted((int(address), int(size), key) for address, size, key in blocks)
        self.starts = [b[0] for b in blocks]
        self.ends = [b[0] + b[1] for b in blocks]
        self.sizes = [b[1] for b in blocks]
        self.keys = [b[2] for b in blocks]
        self.program = (program_globals, program_name)
        self.deadline, self.budget_s = started + budget_s, budget_s
        self.max_holders, self.outcome = max_holders, outcome  # Note [Bounded search]
        self.caller, self.handled = threading.get_ident(), sys.exc_info()[1]  # its exception's frames: roots
        self.objects = self.exposing = self.levels = 0
        self.note = None
        self.climbed = False  # every path up was followed to its end
        self.owned = []  # Note [Own objects]
        self.own = {id(self), id(self.owned)}
        self.nodes = self._own({})  # id -> every object the search reached
        self.pending = self._own({})  # id -> an object reached and not yet followed up (Note [Paths found late])
        self.targets = {}  # id of an exposing object -> its block
        self.grad_tensors = []  # ids of exposing tensors that have an autograd graph
        self.parents, self.children = {}, {}  # id -> ids found referring to it / referred to by it
        self.roots = {}  # id of a module dict, the program's globals or a frame -> its scope
        self.resolved = set()  # ids known to have a path to a root
        self.locals_of = {}  # id of a live frame's local value -> ids of those frames
        self.toward, self.places, self.edge_maps, self.saved_names = {}, {}, {}, {}
        self.claims = []  # (path length, order, block, holder, example): the shortest path claims a block

    def _own(self, container):
        self.owned.append(container)
        self.own.add(id(container))
        return container

    def stop(self, why):
        if self.note is None:
            self.note = why

    def out_of_time(self, doing):
        if time.perf_counter() <= self.deadline:
            return False
        self.stop("time budget of %g s spent while %s" % (self.budget_s, doing))
        return True

    def run_and_publish(self):
        """The whole search, published step by step (Note [Bounded search]); then drops all it found."""
        try:
            self.run()
        except BaseException as e:  # SystemExit from a property must not end the report
            self.stop("holder search failed: %s" % describe(e))
        finally:
            self.publish(None)
            self.clear()

    def run(self):
        self.find_exposing()
        if self.note is None:
            self.publish("tracing %d exposing objects to their roots" % len(self.targets))
            self.climb()
        self.publish("naming their holders")
        self.shortest_paths()
        self.claim_direct()
        self.publish("walking autograd graphs")
        self.walk_graphs()

    def publish(self, doing):  # what it found so far, and the step it takes now (None: done)
        found = dict(held_by=self.held_by(self.max_holders), complete=self.note is None, note=self.note,
                     objects=self.objects, exposing=self.exposing, levels=self.levels)
        self.outcome.update(found=found, doing=doing)

    def block_at(self, address):
        if not isinstance(address, int):
            return None
        i = bisect.bisect_right(self.starts, address) - 1
        return i if i >= 0 and address < self.ends[i] else None

    def find_exposing(self):
        """Step 1: the objects whose memory lies in one of the blocks."""
        objs = gc.get_objects()
        self.objects = len(objs)
        self.publish("looking for objects that expose the blocks")  # the count, before the program's code runs
        tensor_type = getattr(sys.modules.get("torch"), "Tensor", None)
        samples = dict(zip(map(type, reversed(objs)), reversed(objs)))  # each type, with its first object
        tracked_types = set(samples)
        exposers = exposing.exposers(tracked_types, tensor_type)
        # The other types' objects may carry the interface themselves: judged by that one object.
        for tp in exposers:
            samples.pop(tp, None)
        exposers.update(exposing.instance_exposers(samples))
        del samples
        candidates = [o for o in objs if type(o) in exposers] if exposers else []
        # gc does not track some types (numpy arrays): their instances are seen as referents only
        referents = gc.get_referents(*objs)
        del objs  # it refers to every object: each heap scan would find it
        untracked = exposing.exposers(set(map(type, referents)) - tracked_types, tensor_type)
        if untracked:
            candidates += [o for o in referents if type(o) in untracked]
            exposers.update(untracked)
        del referents
        for obj in candidates:  # the time is read at each: an object's code may take long
            if self.out_of_time("looking for objects that expose the blocks"):
                return
            expose = exposers[type(obj)]
            block = self.block_at(exposing.address(expose, obj))
            if block is None or id(obj) in self.targets:
                continue
            self.nodes[id(obj)] = obj
            self.targets[id(obj)] = block
            self.exposing += 1
            if expose is exposing.tensor_address and exposing.address(exposing.grad_fn, obj) is not None:
                self.grad_tensors.append(id(obj))

    def add_root(self, obj, scope):
        self.nodes[id(obj)] = obj
        self.roots[id(obj)] = scope
        self.resolved.add(id(obj))

    def add_roots(self):
        program_globals, program_name = self.program
        if isinstance(program_globals, dict):
            self.add_root(program_globals, ("global", program_name or "the program", None))
        for name, module in list(sys.modules.items()):
            namespace = getattr(module, "__dict__", None)
            if isinstance(namespace, dict) and id(namespace) not in self.roots:
                self.add_root(namespace, ("global", _module_label(name, module), None))
        local_values = self._own([])  # keeps each id in locals_of that object's while another thread runs
        for frame in self.frames():
            self.add_root(frame, frame_scope(frame))
            for _, value in frame_locals(frame):
                local_values.append(value)
                self.locals_of.setdefault(id(value), []).append(id(frame))

    def frames(self):
        """Every thread's frames but the search thread's, those of the exception handled or last reported; not ours."""
        found, seen = [], set()
        starts = [f for t, f in sys._current_frames().items() if t != threading.get_ident() or t == self.caller]
        for exc in (self.handled, getattr(sys, "last_exc", None), getattr(sys, "last_value", None)):
            tb = getattr(exc, "__traceback__", None)
            while tb is not None:
                starts.append(tb.tb_frame)
                tb = tb.tb_next
        for frame in starts:
            while frame is not None and id(frame) not in seen:
                seen.add(id(frame))
                if not is_own_frame(frame):
                    found.append(frame)
                frame = frame.f_back
        starts.clear()  # it holds this call's own frame: a cycle that would keep our locals alive
        return self._own(found)

    def link(self, child, parent):
        self.parents.setdefault(child, []).append(parent)
        self.children.setdefault(parent, []).append(child)
        if parent in self.resolved:
            stack = [child]
            while stack:
                node = stack.pop()
                if node not in self.resolved:
                    self.resolved.add(node)
                    stack.extend(self.children.get(node, ()))

    def climb(self):
        """Step 2: breadth first upwards, one heap scan per level, while an exposing object has no root.
        Each level follows the objects found and not yet followed that lie on a path up from an exposing
        object still without a root (Note [Paths found late])."""
        self.add_roots()
        for target in self.targets:
            self.found(self.nodes[target])
        while True:
            frontier = self.still_needed()
            if not frontier:
                self.climbed = True
                return
            if self.levels == MAX_LEVELS:
                self.stop("stopped after %d levels: %d exposing objects were not traced to a root"
                          % (MAX_LEVELS, self.unresolved()))
                return
            if self.out_of_time("tracing %d exposing objects to their roots" % self.unresolved()):
                return
            self.levels += 1
            for obj in frontier:
                del self.pending[id(obj)]
            self.expand(frontier)

    def found(self, obj):
        """A new object on the way up: to be followed, and linked to the frames it is a local of."""
        self.pending[id(obj)] = obj
        for frame in self.locals_of.get(id(obj), ()):
            self.link(id(obj), frame)

    def unresolved(self):
        return sum(1 for t in self.targets if t not in self.resolved)

    def still_needed(self):
        """The objects not yet followed on a path up from an exposing object that has no root yet."""
        ancestors, stack = set(), [t for t in self.targets if t not in self.resolved]
        while stack:
            node = stack.pop()
            if node not in ancestors and node not in self.resolved:
                ancestors.add(node)
                stack.extend(self.parents.get(node, ()))
        return self._own(tuple(obj for node, obj in self.pending.items() if node in ancestors))

    def referrers(self, frontier, wanted):
        if len(frontier) <= WIDE_LEVEL:
            return gc.get_referrers(*frontier)  # CPython leaves out the argument tuple itself
        get_referents = gc.get_referents
        return [o for o in gc.get_objects() if not wanted.isdisjoint(map(id, get_referents(o)))]

    def expand(self, frontier):
        """The next level up: the objects referring to `frontier`, their links recorded, the new ones found."""
        wanted = {id(o) for o in frontier}
        for referrer in self._own(self.referrers(frontier, wanted)):
            rid = id(referrer)
            if rid in self.own or (isinstance(referrer, types.FrameType) and is_own_frame(referrer)):
                continue
            if rid not in self.nodes:
                if isinstance(referrer, types.FrameType):
                    self.add_root(referrer, frame_scope(referrer))
                else:
                    self.nodes[rid] = referrer
                    self.found(referrer)
            try:
                for child in {id(c) for c in gc.get_referents(referrer)} & wanted:
                    self.link(child, rid)
            except Exception:
                pass

    def shortest_paths(self):
        """Step 3 starts here: breadth first down from every root over the links found, so that each
        object's path is a shortest one; the program's globals, then frames, go before modules."""
        program_id = id(self.program[0])
        order = sorted(self.roots, key=lambda r: (r != program_id, self.roots[r][2] is None))
        queue = collections.deque(order)
        self.toward = dict.fromkeys(order)
        while queue:
            node = queue.popleft()
            for child in self.children.get(node, ()):
                if child not in self.toward:
                    self.toward[child] = node
                    queue.append(child)

    def place(self, node):
        found = self.places.get(node)
        if found is not None:
            return found
        parent = self.toward[node]
        if parent is None:
            found = _Place("", "root", "", None, self.roots[node], None, None, 0)
        else:
            up = self.place(parent)
            edge, step, detail = self.edge(parent, up, node)
            owner = up.owner if up.edge in _TRANSPARENT else parent
            if up.edge == "root" and edge == "name":
                origin = "%s `%s` in %s" % (up.scope[0], step, _in(up.scope, True))
                found = _Place(step, "name", step, parent, up.scope, origin, detail, 1)
            elif up.edge == "root":  # a frame's temporary, or a global under a key that is not a name
                expr = "(unnamed %s)" % type(self.nodes[node]).__name__
                found = _Place(expr, "unnamed", step, parent, up.scope, _root_phrase(up.scope, True), None, 1)
            else:
                expr = up.expr if edge == "attrdict" else up.expr + step
                found = _Place(expr, edge, step, owner, up.scope, up.origin, detail, up.depth + 1)
        self.places[node] = found
        return found

    def edge(self, parent, up, child):
        """(kind, text, detail) of the step from `parent` to `child`; text extends an expression."""
        steps = self.edge_maps.get(parent)
        if steps is None:
            try:
                steps = self.edge_map(self.nodes[parent], up)
            except BaseException:  # an attribute's own code raised, SystemExit too (Note [Bounded search])
                steps = {}
            self.edge_maps[parent] = steps
        if child in steps:
            return steps[child]
        return "other", " -> a %s" % type(self.nodes[child]).__name__, None

    def edge_map(self, obj, up):
        """id of each object `obj` refers to -> (kind, text, detail), for the kinds that have names."""
        if up.edge == "root":
            pairs = frame_locals(obj) if isinstance(obj, types.FrameType) else obj.items()
            return {id(v): ("name", k, None) for k, v in pairs if isinstance(k, str)}
        if isinstance(obj, dict):
            steps = {id(k): ("key", " (a key)", None) for k in obj}
            for k, v in obj.items():
                named = up.edge == "attrdict" and isinstance(k, str)
                steps[id(v)] = ("attr", "." + k, None) if named else ("item", "[%s]" % _key_text(k), None)
            return steps
        if isinstance(obj, tuple) and up.edge == "closure":
            names = self.nodes[up.owner].__code__.co_freevars
            return {id(c): ("cellref", "[%d]" % i, (up.owner, names[i])) for i, c in enumerate(obj)}
        if isinstance(obj, (list, tuple, collections.deque)):
            return {id(v): ("index", "[%d]" % i, None) for i, v in reversed(list(enumerate(obj)))}
        if isinstance(obj, (set, frozenset)):
            return {id(v): ("set", " (an element)", None) for v in obj}
        if isinstance(obj, types.CellType):
            return {id(obj.cell_contents): ("cell", ".cell_contents", up.detail)}
        if isinstance(obj, (types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)):
            attr = {types.GeneratorType: "gi_frame", types.CoroutineType: "cr_frame"}.get(type(obj), "ag_frame")
            frame = getattr(obj, attr)
            items = frame_locals(frame) if frame is not None else []
            return {id(v): ("item", ".%s.f_locals[%r]" % (attr, k), None) for k, v in items}
        return self.attribute_map(obj)

    def attribute_map(self, obj):
        steps = {id(type(obj)): ("attr", ".__class__", None)}
        if isinstance(obj, types.MethodType):
            steps[id(obj.__func__)] = ("attr", ".__func__", None)
            steps[id(obj.__self__)] = ("attr", ".__self__", None)
        if isinstance(obj, types.FunctionType):
            for name in ("__defaults__", "__kwdefaults__"):
                steps[id(getattr(obj, name))] = ("attr", "." + name, None)
            if obj.__closure__:
                steps[id(obj.__closure__)] = ("closure", ".__closure__", None)
        for cls in type(obj).__mro__:
            slots = cls.__dict__.get("__slots__", ())
            for name in (slots,) if isinstance(slots, str) else slots:
                if name not in ("__dict__", "__weakref__") and hasattr(obj, name):
                    steps.setdefault(id(getattr(obj, name)), ("attr", "." + name, None))
        if isinstance(obj, type):
            # a class's attribute dict is not reachable from Python (vars() gives a mappingproxy)
            dicts = [c for c in gc.get_referents(obj) if type(c) is dict]
            steps.update((id(d), ("attrdict", "", None)) for d in dicts[:1])
        namespace = getattr(obj, "__dict__", None)
        if isinstance(namespace, dict):
            steps[id(namespace)] = ("attrdict", "", None)
            steps.update((id(v), ("attr", "." + k, None)) for k, v in namespace.items() if isinstance(k, str))
        return steps

    def locator(self, place):
        """The root a place hangs from: "global `h` in train.py", or "`a.b`, reached from global `a` in ..."."""
        if place.edge == "name":
            return place.origin
        return "`%s`, reached from %s" % (place.expr, place.origin)

    def holder(self, place):
        """The phrase naming what holds an exposing object: the container that refers to it, or the
        nearest one above it reached by a name, a key or an attribute rather than by a position."""
        kind = place.scope[0]
        if place.edge == "name":
            return "%s `%s` in %s" % (kind, place.expr, _in(place.scope, False))
        if place.edge == "unnamed":
            return _root_phrase(place.scope, False)
        owner, around = place.owner, self.place(place.owner)
        while around.edge in _POSITIONAL:
            owner, around = around.owner, self.place(around.owner)
        container = self.nodes[owner]
        closure = place.detail if place.edge == "cell" else around.detail if around.edge == "cell" else None
        if closure is not None:
            function_id, cell = closure
            return "a closure of `%s` (cell `%s`, %s)" % (
                self.nodes[function_id].__qualname__, cell, self.locator(self.place(function_id)))
        if place.edge == "attr" and owner == place.owner:
            return "%s (%s)" % (_what(container), self.locator(around))
        if around.edge == "attr":
            return "attribute `%s` of %s (%s)" % (around.step, _what(self.nodes[around.owner]),
                                                 self.locator(self.place(around.owner)))
        if around.edge == "name":
            return "%s `%s` (%s in %s)" % (type(container).__name__, around.expr, kind, _in(around.scope, True))
        if around.edge == "unnamed":
            return "a `%s` (%s)" % (type(container).__name__, around.origin)
        return "%s `%s` (reached from %s)" % (type(container).__name__, around.expr, around.origin)

    def claim(self, depth, block, holder, example):
        self.claims.append((depth, len(self.claims), block, holder, example))

    def claim_direct(self):
        for target, block in self.targets.items():
            if target in self.toward:
                place = self.place(target)
                self.claim(place.depth, block, self.holder(place), place.expr)
            elif self.climbed:
                self.claim(float("inf"), block, NO_ROOT, "a `%s` object" % type(self.nodes[target]).__name__)

    def graph_holder(self, tensor_id):
        """(holder, expression, path length) of the autograd graph of an exposing tensor."""
        if tensor_id not in self.toward:
            return NO_ROOT, "a tensor", float("inf")
        place = self.place(tensor_id)
        if place.edge in _POSITIONAL:  # losses[0], losses[1], ...: one holder, the container
            return "the autograd graphs of the tensors in %s" % self.holder(place), place.expr, place.depth
        where = "%s in %s" % (place.scope[0], _in(place.scope, True)) if place.edge == "name" else place.origin
        return "the autograd graph of `%s` (%s)" % (place.expr, where), place.expr, place.depth

    def walk_graphs(self):
        """Blocks held by the autograd graph of an exposing tensor: its nodes' saved tensors, each node
        once, the tensors with the shortest paths first."""
        seen, kept = set(), self._own([])  # kept: a node's id stays its own while we walk
        tensors = [self.graph_holder(t) + (t,) for t in self.grad_tensors if t in self.toward or self.climbed]
        for holder, expr, depth, tensor_id in sorted(tensors, key=lambda t: t[2]):
            stack = [(exposing.address(exposing.grad_fn, self.nodes[tensor_id]), expr + ".grad_fn", 0)]
            while stack:
                if not len(seen) % 64 and self.out_of_time("walking autograd graphs"):
                    return
                node, path, level = stack.pop()
                if node is None or id(node) in seen:
                    continue
                seen.add(id(node))
                kept.append(node)
                self.claim_saved(node, path, depth + 1, holder)
                for i, (upstream, _) in enumerate(getattr(node, "next_functions", ())):
                    shown = "%s.next_functions[%d][0]" % (path, i) if level < GRAPH_DEPTH_SHOWN else \
                        "%s.grad_fn...%s" % (expr, type(upstream).__name__)
                    stack.append((upstream, shown, level + 1))

    def claim_saved(self, node, path, depth, holder):
        tensor_type = sys.modules["torch"].Tensor
        names = self.saved_names.get(type(node))
        if names is None:
            # "_saved_*" of built-in nodes, a custom Function's ctx.saved_tensors, a leaf's AccumulateGrad
            names = [n for n in dir(node) if n.startswith("_saved_") or n in ("saved_tensors", "variable")]
            self.saved_names[type(node)] = names
        for name in names:
            try:
                value = getattr(node, name)
            except BaseException:  # a saved tensor freed by backward() raises RuntimeError; a custom one, anything
                continue
            for saved in value if isinstance(value, (tuple, list)) else (value,):
                if not isinstance(saved, tensor_type):
                    continue
                block = self.block_at(exposing.address(exposing.tensor_address, saved))
                if block is not None:
                    self.exposing += 1
                    self.claim(depth, block, holder, "%s.%s" % (path, name))

    def held_by(self, max_holders):
        """Each block to the first claim on it (shortest path first); holders grouped by phrase per key."""
        taken, per_key = set(), {}
        for _, _, block, holder, example in sorted(self.claims, key=lambda c: c[:2]):
            if block in taken:
                continue
            taken.add(block)
            entries = per_key.setdefault(self.keys[block], {})
            entry = entries.setdefault(holder, {"holder": holder, "bytes": 0, "blocks": 0, "example": example})
            entry["bytes"] += self.sizes[block]
            entry["blocks"] += 1
        return {key: sorted(entries.values(), key=lambda e: (-e["bytes"], e["holder"]))[:max_holders]
                for key, entries in per_key.items()}

    def clear(self):
        """Drops every reference to what the search found (no leak, no cycle left behind)."""
        for container in self.owned:
            if isinstance(container, (list, dict)):
                container.clear()
        self.__dict__.clear()
