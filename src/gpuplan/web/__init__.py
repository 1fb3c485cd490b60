"""`gpuplan web`: a local server with a JSON API over the engine and the page that draws it."""
