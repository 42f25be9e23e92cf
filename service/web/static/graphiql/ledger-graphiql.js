// GPU Ledger's GraphiQL: the vendored GraphiQL with a "Bearer token" field (service/api/graphiql.py).
// The token lives in this tab's sessionStorage only: it is gone when the tab closes and other
// sites never see it. Every request goes to this origin's /graphql (the page's CSP allows no other).
(function () {
  "use strict";
  var TOKEN_KEY = "gpu-ledger.token";
  var endpoint = document.currentScript.dataset.endpoint || "/graphql";
  var input = document.getElementById("ledger-token");
  var show = document.getElementById("ledger-token-show");
  var status = document.getElementById("ledger-status");

  function storedToken() {
    try {
      return window.sessionStorage.getItem(TOKEN_KEY) || "";
    } catch (e) {  // storage disabled: the field still works for this page's life
      return "";
    }
  }

  function storeToken(token) {
    try {
      if (token) window.sessionStorage.setItem(TOKEN_KEY, token);
      else window.sessionStorage.removeItem(TOKEN_KEY);
    } catch (e) { /* storage disabled */ }
  }

  function showStatus(httpStatus, body) {
    var error = body && body.errors && body.errors[0];
    var code = error && error.extensions && error.extensions.code;
    if (httpStatus >= 400) {
      status.className = "ledger-status-error";
      status.textContent = "HTTP " + httpStatus + (code ? " " + code : "") +
        (error && error.message ? ": " + error.message : "");
    } else {
      status.className = error ? "ledger-status-warn" : "ledger-status-ok";
      status.textContent = "HTTP " + httpStatus + (error ? " with errors" + (code ? " (" + code + ")" : "") : " OK");
    }
  }

  // The default query: the last seven whole UTC days, so it has data on a fresh demo.
  function defaultQuery() {
    var end = new Date();
    end.setUTCHours(0, 0, 0, 0);
    var start = new Date(end.getTime() - 7 * 24 * 3600 * 1000);
    var iso = function (d) { return d.toISOString().replace(".000Z", "Z"); };
    return "# GPU Ledger GraphQL API. Put your token in the Bearer token field above (gpu-ledger tokens\n" +
      "# create --name NAME --scope read); Ctrl-Enter runs the query, Ctrl-Space completes.\n" +
      "{\n" +
      "  usage(window: {start: \"" + iso(start) + "\", end: \"" + iso(end) + "\"}, groupBy: [ENVIRONMENT]) {\n" +
      "    environment\n    gpuHours\n    effectiveGpuHours\n    utilizationPct\n    idleGpuHours\n  }\n" +
      "}\n";
  }

  function fetcherFor(token) {
    return function (params, options) {
      var headers = Object.assign({}, (options && options.headers) || {}, {
        "Content-Type": "application/json",
        Accept: "application/json",
      });
      if (token) headers.Authorization = "Bearer " + token;  // the field wins over the header editor
      return fetch(endpoint, {
        method: "POST",
        headers: headers,
        body: JSON.stringify(params),
        credentials: "omit",
      }).then(function (response) {
        return response.text().then(function (text) {
          var body;
          try {
            body = JSON.parse(text);
          } catch (e) {
            body = {errors: [{message: "HTTP " + response.status + ": " + text.slice(0, 500)}]};
          }
          showStatus(response.status, body);
          return body;
        });
      });
    };
  }

  var root = ReactDOM.createRoot(document.getElementById("graphiql"));
  var current = null;

  function render() {
    var token = input.value.trim();
    if (token === current) return;
    current = token;
    storeToken(token);
    // A new fetcher makes GraphiQL fetch the schema again, now with the new token.
    root.render(React.createElement(GraphiQL, {
      fetcher: fetcherFor(token),
      defaultQuery: defaultQuery(),
      shouldPersistHeaders: false,
    }));
  }

  input.value = storedToken();
  input.addEventListener("change", render);
  input.addEventListener("keydown", function (event) {
    if (event.key === "Enter") render();
  });
  show.addEventListener("click", function () {
    var hidden = input.type === "password";
    input.type = hidden ? "text" : "password";
    show.textContent = hidden ? "Hide" : "Show";
  });
  render();
})();
