"""The command line: parse, call the engine, render. No formulas here."""
