"""The results site `weightsearch serve` offers beside its JSON routes: studies, a study's curves,
the recommendation and the picture across tasks, as server-rendered HTML with SVG charts. It is
read-only, works offline (every asset from the server) and runs no inline script or style, so a
Content-Security-Policy without `unsafe-inline` holds."""
