"""Who shares a host, and the trees the collectives run over (IMPI's masters, seed 003 §4.2).

A host's *master* is its lowest rank. Collectives run in two phases when some host holds
several ranks: the masters (or the root, standing for its host) exchange among themselves,
then each spreads to or gathers from its local ranks. Among the masters a collective is
*linear* (the root talks to each) when there are fewer than ``coll_maxlinear`` hosts, else
*logarithmic* (a binomial tree).
"""

from __future__ import annotations

from collections.abc import Sequence


class Topology:
    def __init__(self, rank: int, hosts: Sequence[str]) -> None:
        self.rank = rank
        self.size = len(hosts)
        self.host_of = list(hosts)
        self.locals: dict[str, list[int]] = {}
        for r, h in enumerate(hosts):
            self.locals.setdefault(h, []).append(r)
        #: masters in rank order (IMPI's master numbering)
        self.masters = sorted(ranks[0] for ranks in self.locals.values())
        self.nhosts = len(self.masters)
        self.shared = self.nhosts < self.size

    def is_master(self, r: int) -> bool:
        return self.locals[self.host_of[r]][0] == r

    def master_of(self, r: int) -> int:
        return self.locals[self.host_of[r]][0]

    def local_ranks(self, r: int) -> list[int]:
        return self.locals[self.host_of[r]]

    def reps(self, root: int) -> list[int]:
        """One rank per host, root first (standing for its host), the others' masters in
        rank order."""
        root_host = self.host_of[root]
        return [root] + [m for m in self.masters if self.host_of[m] != root_host]

    def tree(
        self, root: int, binomial: bool, two_phase: bool, maxlinear: int | None = None
    ) -> tuple[int | None, list[int]]:
        """(parent, children in ascending subtree order) of this rank in a broadcast from
        ``root``; a reduction runs the same tree upward. In two phases the local phase is a
        binomial tree too when a host holds ``maxlinear`` ranks or more (IMPI leaves the
        local phase to the implementation), else linear."""
        me = self.rank
        if two_phase:
            reps = self.reps(root)
            rep = root if self.host_of[me] == self.host_of[root] else self.master_of(me)
            local = [rep] + [r for r in self.local_ranks(me) if r != rep]
            local_binomial = maxlinear is not None and len(local) >= maxlinear
            lparent, lchildren = group_tree(local, me, local_binomial)
            if me != rep:
                return lparent, lchildren
            parent, children = group_tree(reps, me, binomial)
            return parent, children + lchildren
        group = [root] + [r for r in range(self.size) if r != root]
        return group_tree(group, me, binomial)


def group_tree(group: Sequence[int], me: int, binomial: bool) -> tuple[int | None, list[int]]:
    """Parent and children of ``me`` in a tree over ``group`` rooted at group[0]. Binomial:
    index i's subtree covers indices [i, i + lowbit(i)), children i+1, i+2, i+4, …, so folding
    children in order keeps group order (what non-commutative reductions need)."""
    n = len(group)
    i = group.index(me)
    if not binomial:
        return (None, list(group[1:])) if i == 0 else (group[0], [])
    parent = None
    mask = 1
    while mask < n:
        if i & mask:
            parent = group[i - mask]
            break
        mask <<= 1
    children = []
    m = 1
    while m < mask and i + m < n:
        children.append(group[i + m])
        m <<= 1
    return parent, children
