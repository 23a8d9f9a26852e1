"""Reads PostgREST's hspec-wai spec files (test/spec/Feature/Query/*.hs) into request/response cases.

Only the shapes the specs use for plain HTTP exchanges are understood: `get`/`post`/`patch`/
`put`/`delete`/`request METHOD PATH HEADERS BODY`, followed by `shouldRespondWith` and a matcher
(a `[json|…|]` or string body, or a status, with `{ matchStatus, matchHeaders }`). A case (an `it`
block) written with anything else (`liftIO`, bindings, `shouldBe`, interpolated JSON…) is kept
with the reason it cannot be run, so that the runner reports it instead of hiding it.
"""

import json
import re

REQUEST_METHODS = {
    "methodGet": "GET",
    "methodPost": "POST",
    "methodPatch": "PATCH",
    "methodPut": "PUT",
    "methodDelete": "DELETE",
    "methodHead": "HEAD",
    "methodOptions": "OPTIONS",
}
SHORT_REQUESTS = {"get": ("GET", False), "delete": ("DELETE", False), "options": ("OPTIONS", False),
                  "post": ("POST", True), "patch": ("PATCH", True), "put": ("PUT", True)}
HEADER_NAMES = {
    "hAccept": "Accept",
    "hContentType": "Content-Type",
    "hLocation": "Location",
    "hContentLength": "Content-Length",
    "hAuthorization": "Authorization",
    "hRange": "Range",
    "hContentRange": "Content-Range",
    "hPrefer": "Prefer",
}
CONTENT_TYPE_MATCHERS = {
    "matchContentTypeJson": "application/json; charset=utf-8",
    "matchContentTypeSingular": "application/vnd.pgrst.object+json; charset=utf-8",
    "matchCTArrayStrip": "application/vnd.pgrst.array+json;nulls=stripped; charset=utf-8",
    "matchCTSingularStrip": "application/vnd.pgrst.object+json;nulls=stripped; charset=utf-8",
}
PG_VERSION = 150  # the version the runner starts; `actualPgVersion < pgVersionNNN` is decided with it


class Unsupported(Exception):
    """A construct this reader does not evaluate; the case is reported as not runnable."""


# ---------------------------------------------------------------------------------------------
# Tokens

TOKEN = re.compile(
    r"""
    (?P<ws>[ \t\r\n]+)
  | (?P<comment>--[^\n]*)
  | (?P<block>\{-.*?-\})
  | (?P<quasi>\[(?P<qname>[a-zA-Z]+)\|(?P<qbody>.*?)\|\])
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<number>\d+(?:\.\d+)?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_'.]*)
  | (?P<tick>`[A-Za-z_][A-Za-z0-9_']*`)
  | (?P<punct>[()\[\]{},;])
  | (?P<op>[!#$%&*+./<=>?@\\^|~:-]+)
  | (?P<char>'(?:[^'\\]|\\.)')
    """,
    re.VERBOSE | re.DOTALL,
)


def tokenize(text):
    out = []
    pos = 0
    while pos < len(text):
        m = TOKEN.match(text, pos)
        if not m:
            raise Unsupported(f"cannot read {text[pos:pos + 20]!r}")
        pos = m.end()
        kind = m.lastgroup
        if kind in ("ws", "comment", "block"):
            continue
        if kind == "quasi":
            out.append(("quasi", (m.group("qname"), m.group("qbody"))))
        else:
            out.append((kind, m.group(kind)))
    return out


ASCII_NAMES = ["NUL", "SOH", "STX", "ETX", "EOT", "ENQ", "ACK", "BEL", "BS", "HT", "LF", "VT", "FF",
               "CR", "SO", "SI"]


def relaxed_json(body):
    """aeson-qq's JSON, which lets keys go unquoted (`{ name : "x" }`), as standard JSON."""
    return re.sub(r'("(?:[^"\\]|\\.)*")|([A-Za-z_][A-Za-z0-9_]*)(\s*:)',
                  lambda m: m.group(1) or f'"{m.group(2)}"{m.group(3)}', body)


def haskell_string(lit):
    body = lit[1:-1]
    body = re.sub(r"\\\s*\n\s*\\", "", body)  # string gaps
    body = body.replace("\\&", "")
    escapes = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'"}
    out = []
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in escapes:
                out.append(escapes[nxt])
                i += 2
                continue
            named = re.match(r"(NUL|SOH|STX|ETX|EOT|ENQ|ACK|BEL|BS|HT|LF|VT|FF|CR|SO|SI|DEL)", body[i + 1:])
            if named:
                out.append(chr(ASCII_NAMES.index(named.group(1)) if named.group(1) != "DEL" else 127))
                i += 1 + len(named.group(1))
                continue
            m = re.match(r"\d+", body[i + 1:])
            if m:
                out.append(chr(int(m.group(0))))
                i += 1 + len(m.group(0))
                continue
            raise Unsupported(f"string escape \\{nxt}")
        out.append(c)
        i += 1
    return "".join(out)


def quasi_value(name, body):
    """The bytes of a `[json|…|]` or `[str|…|]` quasi-quote, and whether it is JSON."""
    if name == "json":
        if "#{" in body:
            raise Unsupported("interpolated JSON")
        try:
            value = json.loads(body)
        except ValueError:
            pass
        else:
            return ("json", value)
        try:
            value = json.loads(relaxed_json(body))
        except ValueError as e:
            raise Unsupported(f"JSON the reader cannot parse: {e}")
        return ("json", value)
    if name in ("str", "here", "hereLit"):
        lines = body.split("\n")
        margins = [ln for ln in lines[1:] if ln.strip()]
        if margins and all(re.match(r"^\s*\|", ln) for ln in margins):
            # Text.Heredoc's margins: each line after the first starts at its `|`
            rest = [ln.split("|", 1)[1] if "|" in ln else "" for ln in lines[1:]]
            return ("text", "\n".join([lines[0]] + rest))
        text = body
        if text.startswith("\n"):
            text = text[1:]
        return ("text", text)
    raise Unsupported(f"quasi-quote [{name}|")


# ---------------------------------------------------------------------------------------------
# Expressions


class Parser:
    def __init__(self, tokens, env):
        self.t = tokens
        self.i = 0
        self.env = env

    def peek(self, k=0):
        j = self.i + k
        return self.t[j] if j < len(self.t) else (None, None)

    def next(self):
        tok = self.peek()
        self.i += 1
        return tok

    def expect(self, kind, value=None):
        tok = self.next()
        if tok[0] != kind or (value is not None and tok[1] != value):
            raise Unsupported(f"expected {value or kind}, found {tok[1]!r}")
        return tok

    def at_end(self):
        return self.i >= len(self.t)

    # An atom: a string, number, quasi-quote, list, tuple, or a name with its arguments.
    def atom(self):
        kind, val = self.next()
        if kind == "string":
            return ("text", haskell_string(val))
        if kind == "number":
            return ("number", float(val) if "." in val else int(val))
        if kind == "quasi":
            return quasi_value(*val)
        if kind == "punct" and val == "[":
            items = []
            if self.peek() == ("punct", "]"):
                self.next()
                return ("list", items)
            while True:
                items.append(self.expr())
                k, v = self.next()
                if (k, v) == ("punct", "]"):
                    return ("list", items)
                if (k, v) != ("punct", ","):
                    raise Unsupported(f"list: {v!r}")
        if kind == "punct" and val == "(":
            if self.peek() == ("ident", "if"):
                return self.conditional()
            first = self.expr()
            k, v = self.next()
            if (k, v) == ("punct", ")"):
                return first
            if (k, v) == ("punct", ","):
                second = self.expr()
                self.expect("punct", ")")
                return ("tuple", (first, second))
            raise Unsupported(f"parenthesis: {v!r}")
        if kind == "ident":
            return self.named(val)
        raise Unsupported(f"unexpected {val!r}")

    def conditional(self):
        self.expect("ident", "if")
        cond = []
        while self.peek() != ("ident", "then"):
            if self.at_end():
                raise Unsupported("if without then")
            cond.append(self.next()[1])
        self.next()
        yes = self.expr()
        self.expect("ident", "else")
        no = self.expr()
        self.expect("punct", ")")
        m = re.fullmatch(r"actualPgVersion(<|>=|>|<=)pgVersion(\d+)", "".join(cond))
        if not m:
            raise Unsupported(f"condition {' '.join(cond)}")
        version = int(m.group(2))
        holds = {"<": PG_VERSION < version, ">=": PG_VERSION >= version,
                 ">": PG_VERSION > version, "<=": PG_VERSION <= version}[m.group(1)]
        return yes if holds else no

    def named(self, name):
        if name in self.env:
            return self.env[name]
        if name in HEADER_NAMES:
            return ("text", HEADER_NAMES[name])
        if name in REQUEST_METHODS:
            return ("method", REQUEST_METHODS[name])
        if name == "mempty":
            return ("empty", None)
        if name in ("acceptHdrs",):
            mime = self.text_arg()
            return ("list", [("tuple", (("text", "Accept"), ("text", mime)))])
        if name == "authHeaderJWT":
            return ("tuple", (("text", "Authorization"), ("text", "Bearer " + self.text_arg())))
        if name == "authHeaderBasic":
            import base64
            user = self.text_arg()
            pw = self.text_arg()
            token = base64.b64encode(f"{user}:{pw}".encode()).decode()
            return ("tuple", (("text", "Authorization"), ("text", "Basic " + token)))
        if name == "authHeader":
            typ = self.text_arg()
            return ("tuple", (("text", "Authorization"), ("text", typ + " " + self.text_arg())))
        if name == "rangeUnit":
            return ("tuple", (("text", "Range-Unit"), ("text", "items")))
        if name == "planHdr":
            return ("tuple", (("text", "Accept"), ("text", "application/vnd.pgrst.plan+json")))
        if name in ("rangeHdrs", "rangeHdrsWithCount"):
            rng = self.byte_range()
            hdrs = [("tuple", (("text", "Range-Unit"), ("text", "items"))),
                    ("tuple", (("text", "Range"), ("text", rng)))]
            if name == "rangeHdrsWithCount":
                hdrs.insert(0, ("tuple", (("text", "Prefer"), ("text", "count=exact"))))
            return ("list", hdrs)
        if name in CONTENT_TYPE_MATCHERS:
            return ("match", ("content-type", CONTENT_TYPE_MATCHERS[name]))
        if name == "matchHeaderAbsent":
            return ("match", ("absent", self.text_arg()))
        if name == "matchHeaderValuePresent":
            hdr = self.text_arg()
            return ("match", ("contains", hdr, self.text_arg()))
        if name in ("T.encodeUtf8", "encodeUtf8", "toS", "BL.fromStrict", "LBS.fromStrict"):
            return self.atom()
        raise Unsupported(f"name {name}")

    def text_arg(self):
        v = self.atom()
        if v[0] != "text":
            raise Unsupported(f"text argument expected, got {v[0]}")
        return v[1]

    def byte_range(self):
        dollar = self.peek() == ("op", "$")
        self.next()
        if not dollar and self.t[self.i - 1] != ("punct", "("):
            raise Unsupported("byte range")
        kind = self.expect("ident")[1]
        nums = []
        while self.peek()[0] == "number":
            nums.append(self.next()[1])
        if not dollar:
            self.expect("punct", ")")
        if kind == "ByteRangeFromTo" and len(nums) == 2:
            return f"{nums[0]}-{nums[1]}"
        if kind == "ByteRangeFrom" and len(nums) == 1:
            return f"{nums[0]}-"
        if kind == "ByteRangeSuffix" and len(nums) == 1:
            return f"-{nums[0]}"
        raise Unsupported(f"byte range {kind}")

    # An expression: atoms joined by `<>`, `:` and `<:>`.
    def expr(self):
        left = self.atom()
        while True:
            tok = self.peek()
            if tok == ("op", "<>"):
                self.next()
                right = self.atom()
                left = concat(left, right)
            elif tok == ("op", ":"):
                self.next()
                right = self.expr()
                if right[0] != "list":
                    raise Unsupported("cons onto a non-list")
                left = ("list", [left] + right[1])
            elif tok == ("op", "<:>"):
                self.next()
                name = left
                value = self.atom()
                if name[0] != "text" or value[0] != "text":
                    raise Unsupported("header matcher arguments")
                left = ("match", ("equals", name[1], value[1]))
            else:
                return left


def concat(a, b):
    if a[0] == "list" and b[0] == "list":
        return ("list", a[1] + b[1])
    if a[0] == "text" and b[0] == "text":
        return ("text", a[1] + b[1])
    raise Unsupported("<> of mixed values")


def headers_of(value):
    if value[0] == "empty":
        return []
    if value[0] != "list":
        raise Unsupported("headers are not a list")
    out = []
    for item in value[1]:
        if item[0] == "list":
            out.extend(headers_of(item))
            continue
        if item[0] != "tuple" or item[1][0][0] != "text" or item[1][1][0] != "text":
            raise Unsupported("header is not a pair of strings")
        out.append((item[1][0][1], item[1][1][1]))
    return out


def body_of(value):
    if value[0] == "empty":
        return ""
    if value[0] == "json":
        return json.dumps(value[1], ensure_ascii=False, separators=(",", ":"))
    if value[0] == "text":
        return value[1]
    raise Unsupported(f"body of kind {value[0]}")


# ---------------------------------------------------------------------------------------------
# Statements


STATUSES = {"ok200": 200, "status200": 200, "created201": 201, "status201": 201,
            "noContent204": 204, "status204": 204, "partialContent206": 206, "status206": 206,
            "badRequest400": 400, "status400": 400, "unauthorized401": 401, "status401": 401,
            "notFound404": 404, "status404": 404, "notAcceptable406": 406, "status406": 406,
            "status416": 416, "requestedRangeNotSatisfiable416": 416, "status300": 300}


def parse_bound_request(tokens, env):
    """`r <- REQUEST`: the request, as a step that expects nothing yet (its assertions come
    in the `liftIO` block that follows), and the name it is bound to."""
    if len(tokens) < 3 or tokens[0][0] != "ident" or tokens[1] != ("op", "<-"):
        raise Unsupported("binding")
    name = tokens[0][1]
    p = Parser(tokens[2:], env)
    step = request_of(p)
    if not p.at_end():
        raise Unsupported(f"after the bound request: {p.peek()[1]!r}")
    step["expect"] = {"status": None, "body": None, "headers": [], "json_type": False}
    return name, step


def apply_assertions(text, bound, step):
    """A `liftIO $ do` block's assertions on the response bound to `bound`, into `step`'s
    expectations: its status, headers (equal, present among, or matching a regex) and body."""
    body = text.split("do", 1)[1] if re.match(r"\s*liftIO\s*\$\s*do", text) else None
    if body is None:
        raise Unsupported("liftIO block")
    expect = step["expect"]
    # one assertion per logical line: continuation lines are indented further
    lines, current = [], ""
    for line in body.split("\n"):
        if not line.strip():
            continue
        if current and indent_of(line) > indent_of(current.split("\n")[0]):
            current += " " + line.strip()
        else:
            if current:
                lines.append(current)
            current = line
    if current:
        lines.append(current)
    b = re.escape(bound)
    for line in (l.strip() for l in lines):
        m = re.fullmatch(rf"simpleStatus {b} `shouldBe` (\w+)", line)
        if m and m.group(1) in STATUSES:
            expect["status"] = STATUSES[m.group(1)]
            continue
        m = re.fullmatch(rf'simpleHeaders {b} `shouldSatisfy` matchHeader "([^"]+)" "((?:[^"\\]|\\.)*)"', line)
        if m:
            expect["headers"].append(("regex", m.group(1), haskell_string('"' + m.group(2) + '"')))
            continue
        m = re.fullmatch(rf'simpleHeaders {b} `shouldSatisfy` elem \("([^"]+)", "((?:[^"\\]|\\.)*)"\)', line)
        if m:
            expect["headers"].append(("equals", m.group(1), haskell_string('"' + m.group(2) + '"')))
            continue
        m = re.fullmatch(rf'simpleHeaders {b} `shouldContain` \[\("([^"]+)", "((?:[^"\\]|\\.)*)"\)\]', line)
        if m:
            expect["headers"].append(("equals", m.group(1), haskell_string('"' + m.group(2) + '"')))
            continue
        m = re.fullmatch(rf'simpleBody {b} `shouldBe` ("(?:[^"\\]|\\.)*")', line)
        if m:
            expect["body"] = ("text", haskell_string(m.group(1)))
            continue
        raise Unsupported(f"assertion {line[:40]!r}")


def request_of(p):
    """The request a statement makes (`request METHOD PATH HEADERS BODY`, or `get PATH`, …)."""
    kind, name = p.next()
    if kind != "ident":
        raise Unsupported(f"statement starts with {name!r}")
    if name == "request":
        method = p.atom()
        if method[0] != "method":
            raise Unsupported("request method")
        method = method[1]
        path = p.text_arg()
        headers = headers_of(p.atom())
        body = body_of(p.atom())
    elif name in SHORT_REQUESTS:
        method, has_body = SHORT_REQUESTS[name]
        path = p.text_arg()
        headers = []
        body = body_of(p.atom()) if has_body else ""
    else:
        raise Unsupported(f"statement {name}")
    return {"method": method, "path": path, "headers": headers, "body": body}


def parse_step(tokens, env):
    """`REQUEST `shouldRespondWith` MATCHER [{ … }]` → a step dict."""
    p = Parser(tokens, env)
    step = request_of(p)
    if p.peek() != ("tick", "`shouldRespondWith`"):
        raise Unsupported(f"after the request: {p.peek()[1]!r}")
    p.next()
    matcher = p.atom()
    expect = {"status": 200, "body": None, "headers": [], "json_type": False}
    if matcher[0] == "number":
        expect["status"] = matcher[1]
    elif matcher[0] == "json":
        expect["body"] = ("json", matcher[1])
        expect["json_type"] = True
    elif matcher[0] == "text":
        expect["body"] = ("text", matcher[1])
    else:
        raise Unsupported(f"matcher {matcher[0]}")
    if p.peek() == ("punct", "{"):
        p.next()
        while True:
            field = p.expect("ident")[1]
            p.expect("op", "=")
            value = p.expr()
            if field == "matchStatus":
                if value[0] != "number":
                    raise Unsupported("matchStatus")
                expect["status"] = value[1]
            elif field == "matchHeaders":
                if value[0] != "list":
                    raise Unsupported("matchHeaders")
                for m in value[1]:
                    if m[0] != "match":
                        raise Unsupported("header matcher")
                    expect["headers"].append(m[1])
                expect["json_type"] = False
            else:
                raise Unsupported(f"matcher field {field}")
            k, v = p.next()
            if (k, v) == ("punct", "}"):
                break
            if (k, v) != ("punct", ","):
                raise Unsupported(f"matcher record: {v!r}")
    if not p.at_end():
        raise Unsupported(f"after the matcher: {p.peek()[1]!r}")
    step["expect"] = expect
    return step


def indent_of(line):
    return len(line) - len(line.lstrip(" "))


def statements(lines):
    """Splits an `it` body into statements by layout (a line at the first line's indent starts one)."""
    lines = [ln for ln in lines if ln.strip() and not ln.strip().startswith("--")]
    if not lines:
        return []
    base = indent_of(lines[0])
    out = []
    for ln in lines:
        if indent_of(ln) <= base or not out:
            out.append([ln])
        else:
            out[-1].append(ln)
    return ["\n".join(s) for s in out]


IT = re.compile(r'^(\s*)(it|xit)\s+"((?:[^"\\]|\\.)*)"\s*\$\s*(do\b)?\s*(.*)$')
GROUP = re.compile(r'^(\s*)(describe|context)\s+"((?:[^"\\]|\\.)*)"')
TOP = re.compile(r"^([a-z][A-Za-z0-9_]*) (?:actualPgVersion )?withConfig\b")
LET = re.compile(r'^(\s*)let\s+([a-z][A-Za-z0-9_]*)\s*=\s*(.*)$')
CONFIG = re.compile(r"withConfig\s*\(?\s*(baseCfg(?:\s*\{[^}]*\})?)")


def read_file(path, module):
    """Every `it` case of one spec file."""
    lines = open(path, encoding="utf-8").read().split("\n")
    cases = []
    groups = []  # (indent, name)
    lets = []  # (indent, name, value or Unsupported)
    configs = []  # (indent, config text)
    spec_fn = None
    i = 0
    while i < len(lines):
        line = lines[i]
        top = TOP.match(line)
        if top:
            spec_fn = top.group(1)
            groups, lets, configs = [], [], []
        ind = indent_of(line)
        if line.strip():
            groups = [g for g in groups if g[0] < ind]
            lets = [x for x in lets if x[0] < ind]
            configs = [c for c in configs if c[0] < ind or (top and c[0] == ind)]
        cfg = CONFIG.search(line)
        if cfg:
            configs.append((ind if not top else -1, cfg.group(1)))
        g = GROUP.match(line)
        if g:
            groups.append((ind, haskell_string('"' + g.group(3) + '"')))
        let = LET.match(line)
        if let and not IT.match(line):
            # a `let` at group level names a value for the cases below it
            j = i + 1
            text = let.group(3)
            while j < len(lines) and (not lines[j].strip() or indent_of(lines[j]) > ind):
                text += "\n" + lines[j]
                j += 1
            try:
                value = Parser(tokenize(text), {name: v for _, name, v in lets if not isinstance(v, Unsupported)}).expr()
            except Unsupported as e:
                value = e
            lets.append((ind - 1, let.group(2), value))
        m = IT.match(line)
        if m:
            it_ind = len(m.group(1))
            body_lines = []
            if m.group(5).strip():
                body_lines.append(" " * (it_ind + 2) + m.group(5))
            j = i + 1
            while j < len(lines) and (not lines[j].strip() or indent_of(lines[j]) > it_ind):
                body_lines.append(lines[j])
                j += 1
            env = {}
            broken_lets = {}
            for _, name, value in lets:
                if isinstance(value, Unsupported):
                    broken_lets[name] = value
                else:
                    env[name] = value
            case = {
                "file": module,
                "spec": spec_fn,
                "name": " / ".join([g[1] for g in groups] + [haskell_string('"' + m.group(3) + '"')]),
                "line": i + 1,
                "config": configs[-1][1] if configs else "baseCfg",
                "pending": m.group(2) == "xit",
            }
            try:
                steps = []
                stmts = statements(body_lines) if m.group(4) else ["\n".join(body_lines)]
                bound = None
                for stmt in stmts:
                    if bound is not None:
                        # the assertions on the response just bound
                        apply_assertions(stmt, *bound)
                        bound = None
                        continue
                    toks = tokenize(stmt)
                    for name in broken_lets:
                        if ("ident", name) in toks:
                            raise broken_lets[name]
                    if toks and toks[0] == ("ident", "pendingWith"):
                        case["pending"] = True
                        continue
                    if len(toks) > 1 and toks[1] == ("op", "<-"):
                        name, step = parse_bound_request(toks, env)
                        steps.append(step)
                        bound = (name, step)
                        continue
                    steps.append(parse_step(toks, env))
                if bound is not None:
                    raise Unsupported("a bound response without assertions")
                if not steps and not case["pending"]:
                    raise Unsupported("no request")
                case["steps"] = steps
            except Unsupported as e:
                case["unsupported"] = str(e)
            cases.append(case)
            i = j
            continue
        i += 1
    return cases
