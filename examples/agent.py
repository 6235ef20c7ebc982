"""An agent loop whose model turns and tool calls are steps discovered at run time.

Nothing here is planned in advance: each model turn is a step that sees the
conversation so far and picks the next tool (or the answer); each tool call is
a step named after its tool, so the journal reads ``model#1``,
``tool:search#1``, ``model#2``, ... ``tool:calculator#2``. After a crash the
run replays the recorded turns and tool results (no model call, no tool call
repeated) and carries on from the first one that has no record.

The model is a deterministic fake (no network): it answers questions about
the heights of a few mountains by searching, then calculating.

    steadyflow worker examples.agent
    python -m examples.agent "How much taller is Everest than K2, in feet?"
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import operator
import re
import sys
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence

import attrs

from sdk import Client, current_run, current_step, flow, step
from stores import open_store


@attrs.frozen
class Message:
    role: str  # "user" | "assistant" | "tool"
    content: str
    tool: str | None = None


@attrs.frozen
class Action:
    """The model's decision: call `tool` with `argument`; tool "finish" answers."""

    tool: str
    argument: str


class AgentGaveUp(Exception):
    """The model did not answer within the turn budget."""


#: Real executions (not replays) in this process, by step name, and the
#: idempotency key of each: what a test counts to see nothing ran twice.
executions: Counter[str] = Counter()
idempotency_keys: list[str] = []


def _executed(name: str) -> None:
    executions[name] += 1
    idempotency_keys.append(current_step().idempotency_key)


# -- the fake model ---------------------------------------------------------------

_HEIGHTS_M = {"everest": 8849, "k2": 8611, "kangchenjunga": 8586, "mont blanc": 4806}
_HEIGHT = re.compile(r" is (\d+) m high")


def fake_model(conversation: Sequence[Message]) -> Action:
    """Pick the next action from the conversation alone (so it is reproducible)."""
    question = conversation[0].content.lower()
    peaks = sorted((question.index(p), p) for p in _HEIGHTS_M if p in question)
    found = [m.content for m in conversation if m.role == "tool" and m.tool == "search"]
    sums = [m.content for m in conversation if m.role == "tool" and m.tool == "calculator"]
    if not peaks:
        return Action("finish", "I only know the heights of a few mountains.")
    if len(found) < len(peaks):
        return Action("search", f"height of {peaks[len(found)][1]} in metres")
    heights = [m.group(1) for text in found if (m := _HEIGHT.search(text))]
    if len(heights) < len(peaks):
        return Action("finish", "I could not find every height.")
    if not sums:
        expr = f"{heights[0]} - {heights[1]}" if len(heights) > 1 else heights[0]
        return Action("calculator", expr)
    if "feet" in question and len(sums) == 1:
        return Action("calculator", f"{sums[0]} * 3.28084")
    return Action("finish", f"The answer is {float(sums[-1]):.0f}.")


# -- tools ------------------------------------------------------------------------

_OPS: dict[type[ast.AST], Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    raise ValueError(f"unsupported expression: {ast.dump(node)}")


async def search(query: str) -> str:
    """A fake search engine over a tiny index."""
    _executed("tool:search")
    for peak, metres in _HEIGHTS_M.items():
        if peak in query.lower():
            return f"{peak.title()} is {metres} m high."
    return "No results."


async def calculator(expression: str) -> str:
    """Arithmetic (+ - * /) on numbers; nothing else is evaluated."""
    _executed("tool:calculator")
    return f"{_evaluate(ast.parse(expression, mode='eval').body):.10g}"


#: Tool name -> step. Each tool call is journaled as "tool:{name}#{n}".
TOOLS: dict[str, Callable[[str], Awaitable[str]]] = {
    name: step(name=f"tool:{name}")(fn) for name, fn in {
        "search": search, "calculator": calculator,
    }.items()
}  # fmt: skip


@step(name="model")
async def model_turn(conversation: list[Message]) -> Action:
    """One model call: the conversation so far in, the next action out."""
    _executed("model")
    return fake_model(conversation)


@flow(name="examples.agent")
async def agent(question: str, max_turns: int = 10) -> str:
    """Answer `question` with tools chosen turn by turn by the model."""
    log = current_run().logger
    conversation = [Message("user", question)]
    for _ in range(max_turns):
        action = await model_turn(conversation)
        conversation.append(Message("assistant", action.argument, tool=action.tool))
        if action.tool == "finish":
            return action.argument
        tool = TOOLS.get(action.tool)
        if tool is None:
            result = f"there is no tool named {action.tool!r}"
        else:
            result = await tool(action.argument)
        log.info("%s(%r) -> %r", action.tool, action.argument, result)
        conversation.append(Message("tool", result, tool=action.tool))
    raise AgentGaveUp(f"no answer after {max_turns} model turns")


async def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m examples.agent", description="Ask the agent; print its answer."
    )
    p.add_argument("question", nargs="?", default="How much taller is Everest than K2, in feet?")
    # Default None: open_store() reads $STEADYFLOW_STORE / $STEADYFLOW_PREFIX, as the worker does.
    p.add_argument("--store", default=None, help="store URL ($STEADYFLOW_STORE or local Redis)")
    p.add_argument("--prefix", default=None, help="key prefix ($STEADYFLOW_PREFIX or sf)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the answer")
    args = p.parse_args(argv)
    store = open_store(args.store, prefix=args.prefix)
    try:
        handle = await Client(store).start(agent, args.question)
        print(await handle.result(timeout=args.timeout))
        return 0
    except TimeoutError as exc:
        print(f"{exc}: is a worker running? steadyflow worker examples.agent", file=sys.stderr)
        return 1
    finally:
        await store.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
