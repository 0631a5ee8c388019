"""Tick relays: a cluster's node ticks gathered per group of nodes (--tick-group).

Without them the coordinator asks every load actor for its tick, one Ray call and one reply
a node and second. With them the nodes of each target are dealt into groups; a TickRelay
actor on the first node of a group asks its members, waits for their ticks a little less
than the coordinator waits for a node (RELAY_WAIT_S) and answers with those in, in one
reply: the coordinator makes one call a group and second instead of one a node. The ticks
cross as the nodes gave them (the relay neither merges nor drops anything), so what the
coordinator does with them, and what it records, is the same with or without relays.

A member not in by then is late: the relay keeps its answer to come, and the coordinator
asks the relay for late answers (`late`) until it has them, each counted in the tick it
comes by, as a late node's own reply is. A member whose actor is gone is answered as gone
(the coordinator marks its node lost); a relay that is gone itself (its node lost) sends its
members' ticks back to direct calls, for the rest of the run."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

# a run on more nodes than this groups them (auto); groups of GROUP_AUTO nodes
GROUP_AUTO = 8
# how long a relay waits for its members' ticks: under the coordinator's wait for a node's
# (worker.NODE_TICK_WAIT_S, 0.5 s), so that the relay's reply is in by then
RELAY_WAIT_S = 0.35
# a late call's wait for the next late answer (asked again while any is still to come)
LATE_WAIT_S = 5.0


class MemberGone(Exception):
    """A member's actor is gone (its node or process), as the relay found it."""


class TickRelay:
    """The relay of one group (made a Ray actor with no CPU of its own on the group's first
    node): asks the members' load actors for their ticks and hands back those in."""

    def __init__(self, actors: dict[int, Any]) -> None:
        self._actors = actors  # share -> the member's LoadActor handle
        self._pending: dict[int, asyncio.Future[Any]] = {}  # request id -> the answer to come

    async def tick(self, asks: list[tuple[int, int]], args: tuple[Any, ...],
                   wait_s: float = RELAY_WAIT_S) -> list[tuple[int, bool, Any]]:
        """Ask each (share, request id) of `asks` for its tick; the answers in within `wait_s`
        (and any late one of before), as (request id, ok, the actor's reply or why not)."""
        asked = []
        for share, rid in asks:
            ref = self._actors[share].call.remote("tick", args)
            asked.append(self._pending.setdefault(rid, asyncio.wrap_future(ref.future())))
        if asked:  # a member late before is not waited for again: it comes when it comes
            await asyncio.wait(asked, timeout=wait_s)
        return self._take()

    async def late(self, wait_s: float = LATE_WAIT_S) -> list[tuple[int, bool, Any]]:
        """The late answers in by the first that comes (or `wait_s`)."""
        if self._pending:
            await asyncio.wait(list(self._pending.values()), timeout=wait_s,
                               return_when=asyncio.FIRST_COMPLETED)
        return self._take()

    def _take(self) -> list[tuple[int, bool, Any]]:
        """The answers in, each taken once."""
        out: list[tuple[int, bool, Any]] = []
        for rid, fut in list(self._pending.items()):
            if not fut.done():
                continue
            del self._pending[rid]
            exc = fut.exception()
            if exc is None:
                out.append((rid, True, fut.result()))
            else:
                out.append((rid, False, f"{type(exc).__name__}: {str(exc)[:200]}"))
        return out


class RelayGroup:
    """The coordinator's end of one relay: the tick requests of its members made in one turn
    of the event loop go in one call; the answers resolve each member's request."""

    def __init__(self, members: int, create: Callable[[dict[int, Any], int], Any],
                 get: Callable[[Any], asyncio.Future[Any]],
                 gone: Callable[[str], None] = lambda _why: None) -> None:
        """`members`: how many nodes the group has; `create(actors, share)` makes the relay
        actor on share's node; `get(ref)` is the future of a Ray reply (Replies.get);
        `gone(why)` is told once if the relay is gone."""
        self._create = create
        self._get = get
        self._gone = gone
        self._members: dict[int, Any] = {}  # share -> the member's actor, once spawned
        self.expected = members
        self.relay: Any = None
        self.gone = False  # the relay itself is gone: its members are asked directly
        self._next_rid = 0
        self._asks: list[tuple[int, int]] = []
        self._args: tuple[Any, ...] | None = None
        # request id -> (the member's future, its direct call to fall back on)
        self._waiting: dict[int, tuple[asyncio.Future[Any], Callable[[], asyncio.Future[Any]]]] = {}
        self._late_asked = False
        self.closed = False
        self.calls = 0  # relay calls made (tick and late)

    def member_spawned(self, share: int, actor: Any) -> None:
        """A member's actor is made; the relay is made once they all are."""
        self._members[share] = actor
        if self.relay is None and not self.gone and len(self._members) == self.expected:
            try:
                self.relay = self._create(dict(self._members), min(self._members))
            except Exception as exc:  # no relay: its members are asked directly
                self.gone = True
                self._gone(type(exc).__name__)

    def ask(self, share: int, args: tuple[Any, ...],
            direct: Callable[[], asyncio.Future[Any]]) -> asyncio.Future[Any]:
        """The future of member `share`'s tick for `args` (the same for every member of one
        tick); `direct` asks the member itself, should the relay be gone."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        rid = self._next_rid = self._next_rid + 1
        self._waiting[rid] = (fut, direct)
        if self.gone or self.closed or self.relay is None:
            self._fall_back(rid)
            return fut
        self._asks.append((share, rid))
        if len(self._asks) == 1:
            self._args = args
            loop.call_soon(self._send)
        return fut

    def _send(self) -> None:
        asks, self._asks = self._asks, []
        if self.closed:
            return
        if self.gone:
            for _share, rid in asks:
                self._fall_back(rid)
            return
        self.calls += 1
        self._get(self.relay.tick.remote(asks, self._args)).add_done_callback(self._answered)

    def _answered(self, reply: asyncio.Future[Any]) -> None:
        if reply.cancelled() or self.closed:
            return
        if reply.exception() is not None:  # the relay is gone: its members asked directly
            if not self.gone:
                self._gone(type(reply.exception()).__name__)
            self.gone = True
            for rid in list(self._waiting):
                self._fall_back(rid)
            return
        for rid, ok, value in reply.result():
            waiting = self._waiting.pop(rid, None)
            if waiting is None or waiting[0].done():
                continue
            if ok:
                waiting[0].set_result(value)
            else:
                waiting[0].set_exception(MemberGone(value))
        if self._waiting and not self._late_asked:
            self._late_asked = True
            self.calls += 1
            self._get(self.relay.late.remote()).add_done_callback(self._late_answered)

    def _late_answered(self, reply: asyncio.Future[Any]) -> None:
        self._late_asked = False
        self._answered(reply)

    def _fall_back(self, rid: int) -> None:
        """Request `rid` asked of its member directly; its future takes that answer."""
        waiting = self._waiting.pop(rid, None)
        if waiting is None or waiting[0].done():
            return
        fut, direct = waiting
        answer = direct()

        def take(done: asyncio.Future[Any]) -> None:
            if fut.done():
                return
            if done.cancelled():
                fut.cancel()
            elif done.exception() is not None:
                fut.set_exception(done.exception())  # type: ignore[arg-type]
            else:
                fut.set_result(done.result())

        answer.add_done_callback(take)

    def cancel(self) -> None:
        """Every request still waiting given up (the run is closing)."""
        self.closed = True
        for fut, _direct in self._waiting.values():
            fut.cancel()
        self._waiting.clear()


def groups(shares: list[int], size: int) -> list[list[int]]:
    """`shares` dealt into groups of `size` in order (the last may be smaller)."""
    return [shares[i:i + size] for i in range(0, len(shares), size)]


def group_size(asked: int | None, nodes: int) -> int:
    """The nodes a relay gathers: `asked` (--tick-group; 0: none), or GROUP_AUTO on more than
    GROUP_AUTO nodes."""
    if asked is not None:
        return asked
    return GROUP_AUTO if nodes > GROUP_AUTO else 0

