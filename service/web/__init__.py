"""The built-in dashboard at ``/``: a static HTML/JS/CSS shell and its vendored libraries
(``service/web/static``), which read everything through ``/graphql`` with the caller's token."""
