"""A real MCP client session against `vramscope mcp` (run by test_mcp.py with the installed
environment's Python, where `mcp` and `jsonschema` are installed): lists the tools, calls each on
real inputs, validates every result against its schemas/ file, and checks that a bad input is a
tool error with the command's one line. Prints one JSON line with what it saw.

Usage: python mcp_session.py VRAMSCOPE PYTHON SCHEMAS_DIR GOLDEN_A GOLDEN_B
"""

import json
import sys
from pathlib import Path

import anyio
import jsonschema
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
       "capacity of 79.15 GiB of which 1.50 GiB is free. Process 1234 has 77.64 GiB memory in "
       "use. Of the allocated memory 70.00 GiB is allocated by PyTorch, and 5.00 GiB is reserved "
       "by PyTorch but unallocated.")


async def session(vramscope, python, schemas, a, b):
    schema = {name: json.loads((schemas / f"{name}.schema.json").read_text())
              for name in ("report", "explain", "simulate", "diff", "predict-plan")}
    calls = {
        "report": ({"path": a}, "report"),
        "explain": ({"text": OOM}, "explain"),
        "simulate": ({"path": a, "capacity": "200MiB",
                      "compare": ["", "expandable_segments:True"]}, "simulate"),
        "predict": ({"model": "gpt2", "seq": 512, "fit": "l4", "options": {"dtype": "bf16"}},
                    "report"),
        "plan": ({"model": "gpt2", "budget": "24GiB",
                  "options": {"batch": 32, "seq": 1024}}, "predict-plan"),
        "diff": ({"a": a, "b": b, "fail_if": ["peak_allocated > +10%"]}, "diff"),
    }
    seen = {}
    params = StdioServerParameters(command=vramscope, args=["mcp", "--python", python])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            tools = await s.list_tools()
            seen["tools"] = sorted(t.name for t in tools.tools)
            seen["documented"] = all(t.description for t in tools.tools)
            for name, (arguments, document) in calls.items():
                result = await s.call_tool(name, arguments)
                assert not result.is_error, (name, result.content)
                data = result.structured_content
                if data is None or "result" in data and len(data) == 1:
                    data = json.loads(result.content[0].text)
                jsonschema.validate(data, schema[document])
                seen[name] = {"schema_version": data["schema_version"]}
                if name == "predict":
                    seen[name]["fit"] = data["prediction"]["facts"].get("fit", "")
                if name == "diff":
                    seen[name]["failed"] = data["failed"]
                if name == "plan":
                    seen[name]["options"] = len(data["plan"]["options"])
            bad = await s.call_tool("report", {"path": "/nonexistent/run.pickle"})
            seen["error"] = [bad.is_error, bad.content[0].text]
    print(json.dumps(seen))


if __name__ == "__main__":
    anyio.run(session, sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4], sys.argv[5])
