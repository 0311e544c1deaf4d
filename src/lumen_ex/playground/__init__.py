"""``lumen-ex serve``: the web playground, a local page with a code editor and the hidden tests.

- security.py: who may talk to the server (the token, the Host and Origin checks, the headers);
- files.py: the exercise file the editor shows and saves (digests, conflicts, restoring the stub);
- readme.py: an exercise's README as HTML, raw HTML escaped;
- checks.py: the checks, one at a time in a thread, with torch and a sandboxed worker kept warm;
- app.py: the routes (Starlette), the page and its server-sent events;
- server.py: binding, the printed URL, the browser, and shutting down cleanly.

The page itself is built from frontend/ into static/ (never committed): docs/playground.md.
"""
