"""The parts of scripts/doc_blocks.py, one job each: the checker of the documentation's command
blocks. scripts/doc_blocks.py is the entry point and the user documentation of the directives;
it re-exports what these modules define.

- common.py: the repository, page names in messages, DocError;
- parse.py: the pages covered, their blocks and directives, and the commands of a block;
- fixtures.py: the fixtures a directive names (with=...), the binary and the torch Python;
- run.py: the temporary folder a block's commands run in, and the second run's refusal rule;
- compare.py: shown output against printed output;
- write.py: --write, shown output regenerated from printed output;
- check.py: checking one block of each kind.

Only the Python standard library is used.
"""
