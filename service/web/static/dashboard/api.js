// The GraphQL client: POST /graphql with the user's bearer token (sessionStorage, this tab only;
// the same key GraphiQL uses, so a token typed in one serves the other).

export const TOKEN_KEY = "gpu-ledger.token";

export class ApiError extends Error {
  constructor(message, status, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
  get needsToken() {
    return this.status === 401 || this.code === "UNAUTHENTICATED";
  }
  get forbidden() {
    return this.status === 403 || this.code === "FORBIDDEN";
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export const anonymousRead = () => document.documentElement.dataset.anonymousRead === "true";

export async function gql(query, variables = {}) {
  const headers = { "Content-Type": "application/json", Accept: "application/json" };
  const bearer = token();
  if (bearer) headers.Authorization = `Bearer ${bearer}`;
  let response;
  try {
    response = await fetch("/graphql", { method: "POST", headers, body: JSON.stringify({ query, variables }) });
  } catch (exc) {
    throw new ApiError(`the service did not answer (${exc.message})`, 0);
  }
  let body;
  try {
    body = await response.json();
  } catch {
    throw new ApiError(`the service answered HTTP ${response.status} without JSON`, response.status);
  }
  if (body.errors && body.errors.length) {
    const first = body.errors[0];
    const message = body.errors.map((e) => e.message).join("; ");
    throw new ApiError(message, response.status, first.extensions && first.extensions.code);
  }
  return body.data;
}
