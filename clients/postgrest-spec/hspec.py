"""Reads PostgREST's hspec-wai spec files (test/spec/Feature/Query/*.hs) into request/response cases.

Only the shapes the specs use for HTTP exchanges are understood: `get`/`post`/`patch`/`put`/
`delete`/`request METHOD PATH HEADERS BODY`, followed by `shouldRespondWith` and a matcher (a
`[json|…|]` or string body, or a status, with `{ matchStatus, matchHeaders }`); or bound to a
name (`r <- request …`) and checked by assertions (`simpleBody r ^? nth 0 . key "Plan"
`shouldBe` …`, `planCost r `shouldSatisfy` (> 0)`, …), each a check (what of the response it
observes, the verb, the value or predicate) that the runner evaluates. A case (an `it` block)
written with anything else is kept with the reason it cannot be run, so that the runner
reports it instead of hiding it.
"""

import json
import os
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
POSTGREST_VERSION = "<PostgREST's version>"  # what `prettyVersion` stands for: not Rowgate's
JWT_SECRET = "reallyreallyreallyreallyverysafe"  # SpecHelper's generateSecret, baseCfg's jwt-secret
FIXTURES_DIR = "."  # test/spec/fixtures of the checkout read (`readFixtureFile`); set by read_file
# what `simpleStatus r`, `simpleHeaders r`, `simpleBody r` and `planCost r` observe of a response
RESPONSE_PARTS = {"simpleStatus": "status", "simpleHeaders": "headers", "simpleBody": "body",
                  "planCost": "cost"}


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
    if name in ("json", "aesonQQ"):
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


def hs256_token(claims, secret):
    """A JWT of `claims` signed with HS256 (SpecHelper's generateJWT)."""
    import base64
    import hashlib
    import hmac

    def part(raw):
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    signing = part(b'{"alg":"HS256","typ":"JWT"}') + "." + part(claims.encode())
    signature = hmac.new(secret.encode(), signing.encode(), hashlib.sha256).digest()
    return signing + "." + part(signature)


# A time relative to when a request is sent (`relativeSeconds 35`), as a number in the claims
# of a deferred token: NOW_MARK + 35. The token is signed as the request is sent.
NOW_MARK = 5 * 10 ** 12
RELATIVE = re.compile(r"\b(?:4999|5000)\d{9}\b")  # NOW_MARK ± an offset of the specs' size
DEFERRED = "\x00token\x00"


def deferred_token(claims, secret):
    """A token to be signed when its request is sent (its claims may hold times relative to
    then): see `signed_now`."""
    if not RELATIVE.search(claims):
        return hs256_token(claims, secret)
    return DEFERRED + json.dumps([claims, secret]) + DEFERRED


def signed_now(text):
    """`text` with its deferred tokens signed, their relative times made absolute."""
    import time
    while DEFERRED in text:
        before, rest = text.split(DEFERRED, 1)
        packed, after = rest.split(DEFERRED, 1)
        claims, secret = json.loads(packed)
        claims = RELATIVE.sub(lambda m: str(int(time.time()) + int(m.group(0)) - NOW_MARK), claims)
        text = before + hs256_token(claims, secret) + after
    return text


def timing_metric(metric):
    """SpecHelper's matchServerTimingHasTiming regex (POSIX `[[:digit:]]`) as a Python one."""
    return re.escape(metric) + r";dur=[0-9]+.[0-9]+"


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
            name, body = val
            # `#{name}`: a number bound before (`currentTime <- liftIO $ relativeSeconds 35`)
            for var in re.findall(r"#\{([A-Za-z_][A-Za-z0-9_']*)\}", body):
                value = self.env.get(var)
                if not value or value[0] != "number":
                    raise Unsupported("interpolated JSON")
                body = body.replace("#{" + var + "}", str(value[1]))
            return quasi_value(name, body)
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
            if self.peek() == ("op", "-") and self.peek(1)[0] == "number" and self.peek(2) == ("punct", ")"):
                # a negative number: `(-35)`
                self.i += 3
                return ("number", -float(self.t[self.i - 2][1]) if "." in self.t[self.i - 2][1]
                        else -int(self.t[self.i - 2][1]))
            if self.peek() in (("op", ">"), ("op", "<")):
                # an operator section: `(> 0)`
                op = self.next()[1]
                bound = self.atom()
                self.expect("punct", ")")
                if bound[0] != "number":
                    raise Unsupported("a section of a non-number")
                return ("predicate", op, bound[1])
            if self.peek() == ("op", "\\") and self.peek(1)[0] == "ident" and self.peek(2) == ("op", "->"):
                # a lambda on the value asserted: `(\t -> T.isInfixOf "x" t)`
                self.i += 3
                saved = self.env
                self.env = dict(saved, **{self.t[self.i - 2][1]: ("lambda",)})
                body = self.expr()
                self.env = saved
                self.expect("punct", ")")
                if body[0] != "predicate":
                    raise Unsupported("lambda")
                return body
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
        if name in ("T.encodeUtf8", "encodeUtf8", "toS", "BL.fromStrict", "LBS.fromStrict",
                    "decodeUtf8", "LBS.toStrict", "BL.toStrict"):
            return self.argument()
        if name in ("BL.empty", "LBS.empty"):
            return ("empty", None)
        if name == "readFixtureFile":
            with open(FIXTURES_DIR + "/" + self.text_arg(), "rb") as f:
                return ("bytes", f.read())
        if name == "getInsertDataForTiobePlsTable":
            rows = self.argument()
            if rows[0] != "number":
                raise Unsupported("getInsertDataForTiobePlsTable's argument")
            data = [{"name": f"Lang {i}", "rank": i} for i in range(20, rows[1] + 21)]
            return ("text", json.dumps(data, separators=(",", ":")))
        if name in ("generateJWT", "generateJWTWithSecret"):
            claims = self.argument()
            secret = self.text_arg() if name == "generateJWTWithSecret" else JWT_SECRET
            return ("text", deferred_token(body_of(claims), secret))
        if name == "map":
            fn = self.expect("ident")[1]
            items = self.argument()
            if fn != "matchServerTimingHasTiming" or items[0] != "list":
                raise Unsupported(f"map {fn}")
            return ("list", [("match", ("regex", "Server-Timing", timing_metric(metric)))
                             for metric in (item[1] for item in items[1])])
        if name in RESPONSE_PARTS:
            return ("observe", self.response_arg(), (RESPONSE_PARTS[name],))
        if name == "isErrorFormat":
            part = self.argument()
            if part[0] != "observe" or part[2] != ("body",):
                raise Unsupported("isErrorFormat of a non-body")
            return ("observe", part[1], ("error_format",))
        if name == "subtract":
            # `subtract 1 $ length $ T.splitOn "X" body`: how often "X" occurs in the body
            if self.next() != ("number", "1") or self.next() != ("op", "$") \
                    or self.next() != ("ident", "length") or self.next() != ("op", "$") \
                    or self.next() != ("ident", "T.splitOn"):
                raise Unsupported("subtract")
            needle = self.text_arg()
            part = self.argument()
            if part[0] != "observe" or part[2] != ("body",):
                raise Unsupported("T.splitOn of a non-body")
            return ("observe", part[1], ("occurrences", needle))
        if name == "Status":
            record = self.record()
            return ("status", record["statusCode"][1], record["statusMessage"][1])
        if name in STATUSES:
            return ("status", STATUSES[name], None)
        if name == "BS.filter":
            # `BS.filter (/= ' ') prettyVersion`: PostgREST's version, spaces dropped
            if [self.next() for _ in range(5)] != [("punct", "("), ("op", "/="), ("char", "' '"),
                                                   ("punct", ")"), ("ident", "prettyVersion")]:
                raise Unsupported("BS.filter")
            return ("text", POSTGREST_VERSION)
        if name == "Nothing":
            return ("nothing",)
        if name == "Just":
            return ("just", self.argument())
        if name in ("True", "False"):
            return ("bool", name == "True")
        if name in ("isJust", "notZeroContentLength", "noBlankHeader", "noProfileHeader"):
            return ("predicate", name)
        if name == "elem":
            pair = self.argument()
            return ("predicate", "elem", headers_of(("list", [pair]))[0])
        if name == "matchHeader":
            header = self.text_arg()
            return ("predicate", "matchHeader", header, self.text_arg())
        if name == "T.isInfixOf":
            needle = self.text_arg()
            if self.argument() != ("lambda",):
                raise Unsupported("T.isInfixOf of another value")
            return ("predicate", "infix", needle)
        if name == "not":
            inner = self.argument()
            if inner[:2] != ("predicate", "infix"):
                raise Unsupported("not of another value")
            return ("predicate", "not infix", inner[2])
        if name == "LBS.take":
            n = self.argument()
            if self.argument() != ("lambda",) or self.next() != ("op", "=="):
                raise Unsupported("LBS.take")
            prefix = self.text_arg()
            if n != ("number", len(prefix)):
                raise Unsupported("LBS.take of another length")
            return ("predicate", "prefix", prefix)
        raise Unsupported(f"name {name}")

    def argument(self):
        """A function's argument: an atom, or the whole expression after `$`."""
        if self.peek() == ("op", "$"):
            self.next()
            return self.expr()
        return self.atom()

    def response_arg(self):
        """The name of a bound response (`r` in `simpleBody r`), as the index of its step."""
        value = self.argument()
        if value[0] != "response":
            raise Unsupported("not a bound response")
        return value[1]

    def record(self):
        """`{ field = value, … }`, its fields by name."""
        self.expect("punct", "{")
        fields = {}
        while True:
            field = self.expect("ident")[1]
            self.expect("op", "=")
            fields[field] = self.expr()
            k, v = self.next()
            if (k, v) == ("punct", "}"):
                return fields
            if (k, v) != ("punct", ","):
                raise Unsupported(f"record: {v!r}")

    def text_arg(self):
        v = self.argument()
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
            elif tok == ("op", "^?"):
                self.next()
                if left[0] != "observe" or left[2] != ("body",):
                    raise Unsupported("^? on a non-body")
                left = ("observe", left[1], ("path", self.lens_path()))
            elif tok == ("op", "<:>"):
                self.next()
                name = left
                value = self.atom()
                if name[0] != "text" or value[0] != "text":
                    raise Unsupported("header matcher arguments")
                left = ("match", ("equals", name[1], value[1]))
            else:
                return left


    def lens_path(self):
        """`nth 0 . key "Plan" . …`: the keys and indexes into a JSON body."""
        path = []
        while True:
            step = self.expect("ident")[1]
            if step == "nth":
                index = self.atom()
                if index[0] != "number":
                    raise Unsupported("nth")
                path.append(index[1])
            elif step == "key":
                path.append(self.text_arg())
            else:
                raise Unsupported(f"lens {step}")
            if self.peek() != ("op", "."):
                return path
            self.next()


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
    if value[0] in ("text", "bytes"):
        return value[1]
    raise Unsupported(f"body of kind {value[0]}")


# ---------------------------------------------------------------------------------------------
# Statements


STATUSES = {"ok200": 200, "status200": 200, "created201": 201, "status201": 201,
            "noContent204": 204, "status204": 204, "partialContent206": 206, "status206": 206,
            "badRequest400": 400, "status400": 400, "unauthorized401": 401, "status401": 401,
            "notFound404": 404, "status404": 404, "notAcceptable406": 406, "status406": 406,
            "status416": 416, "requestedRangeNotSatisfiable416": 416, "status300": 300,
            "internalServerError500": 500, "status500": 500}


ASSERTIONS = ("shouldBe", "shouldSatisfy", "shouldContain")


def let_bindings(text):
    """The bindings of a `let` statement (`let a = …` and further `b = …` lines at a's
    column), each as (name, its expression's text)."""
    first = text.split("\n")[0]
    m = re.match(r"(\s*)let\s+", first)
    column = len(m.group(0))
    lines = [" " * column + first[column:]] + text.split("\n")[1:]
    out = []
    for line in lines:
        if not line.strip():
            continue
        if indent_of(line) <= column or not out:
            b = re.match(r"\s*([a-z_][A-Za-z0-9_']*)\s*=(?!=)\s*(.*)$", line)
            if not b:
                raise Unsupported("let binding")
            out.append([b.group(1), b.group(2)])
        else:
            out[-1][1] += "\n" + line
    return out


def assertion(tokens, env, steps):
    """`SUBJECT `shouldBe`|`shouldSatisfy`|`shouldContain` VALUE` on a bound response: a check
    added to the expectations of the step whose response it observes."""
    p = Parser(tokens, env)
    subject = p.expr()
    verb = p.next()
    if subject[0] != "observe" or verb[0] != "tick":
        raise Unsupported(f"assertion on {subject[0]}")
    verb = verb[1].strip("`")
    if verb not in ASSERTIONS:
        raise Unsupported(f"assertion {verb}")
    value = p.expr()
    if not p.at_end():
        raise Unsupported(f"after the assertion: {p.peek()[1]!r}")
    if verb == "shouldSatisfy" and value[0] != "predicate":
        raise Unsupported("shouldSatisfy without a predicate")
    if verb == "shouldContain":
        value = ("headers", headers_of(value))
    _, index, part = subject
    steps[index]["expect"]["checks"].append((part, verb, value))


def liftio_block(text, env, steps):
    """`liftIO $ do` and its statements (bindings and assertions), or `liftIO $ ASSERTION`."""
    m = re.match(r"\s*liftIO\s*\$\s*(do\b)?", text)
    if not m:
        raise Unsupported("liftIO")
    if not m.group(1):
        assertion(tokenize(text[m.end():]), env, steps)
        return
    inner = text[m.end():].split("\n")
    first, rest = inner[0], inner[1:]
    lines = ([" " * (indent_of(rest[0]) if rest else 0) + first.strip()] if first.strip() else []) + rest
    for stmt in statements(lines):
        body_statement(stmt, env, steps)


def body_statement(stmt, env, steps):
    """One statement of a case's body: a binding, a request, an assertion block."""
    toks = tokenize(stmt)
    if not toks:
        return
    if toks[0] == ("ident", "let"):
        for name, text in let_bindings(stmt):
            env[name] = Parser(tokenize(text), env).expr()
        return
    if toks[0] == ("ident", "liftIO"):
        liftio_block(stmt, env, steps)
        return
    if any(t[0] == "tick" and t[1].strip("`") in ASSERTIONS for t in toks):
        assertion(toks, env, steps)
        return
    if len(toks) > 1 and toks[0][0] == "ident" and toks[1] == ("op", "<-"):
        name, rest = toks[0][1], toks[2:]
        if rest[:3] == [("ident", "liftIO"), ("op", "$"), ("ident", "relativeSeconds")]:
            offset = Parser(rest[3:], env).expr()
            if offset[0] != "number":
                raise Unsupported("relativeSeconds")
            # (made absolute when the request is sent: see deferred_token)
            env[name] = ("number", NOW_MARK + offset[1])
            return
        p = Parser(rest, env)
        step = request_of(p)
        if not p.at_end():
            raise Unsupported(f"after the bound request: {p.peek()[1]!r}")
        step["expect"] = {"status": None, "body": None, "headers": [], "json_type": False,
                          "checks": []}
        if name != "_":
            env[name] = ("response", len(steps))
            step["bound"] = True
        steps.append(step)
        return
    if toks[:2] == [("ident", "pure"), ("ident", toks[1][1])] and toks[1][0] == "ident" \
            and env.get(toks[1][1], ("",))[0] == "response":
        # `pure p `shouldRespondWith` MATCHER`: the expectations of the response bound to p
        index = env[toks[1][1]][1]
        checked = parse_step([("ident", "get"), ("string", '"/"')] + toks[2:], env)
        steps[index]["expect"].update({k: v for k, v in checked["expect"].items() if k != "checks"})
        steps[index]["bound"] = False  # (asserted)
        return
    m = re.fullmatch(r"\s*Just\s+([a-z][A-Za-z0-9_']*)\s*<-\s*pure\s*\$\s*lookup\s+(\w+)\s*\$\s*"
                     r"simpleHeaders\s+([a-z][A-Za-z0-9_']*)\s*", stmt)
    if m and m.group(2) in HEADER_NAMES and env.get(m.group(3), ("",))[0] == "response":
        # a header of a response, as the path of a later request
        env[m.group(1)] = ("header of", env[m.group(3)][1], HEADER_NAMES[m.group(2)])
        return
    if toks[0] == ("ident", "void"):
        toks = toks[2:] if toks[1:2] == [("op", "$")] else toks[1:]
        step = request_of(Parser(toks, env))
        step["expect"] = {"status": None, "body": None, "headers": [], "json_type": False,
                          "checks": []}
        steps.append(step)
        return
    steps.append(parse_step(toks, env))


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
        path = p.argument()
        headers = headers_of(p.atom())
        body = body_of(p.atom())
    elif name in SHORT_REQUESTS:
        method, has_body = SHORT_REQUESTS[name]
        path = p.argument()
        headers = []
        body = body_of(p.atom()) if has_body else ""
    else:
        raise Unsupported(f"statement {name}")
    step = {"method": method, "path": "", "headers": headers, "body": body}
    if path[0] == "header of":
        # the path is a header of an earlier response (`get location`)
        step["path_from"] = path[1:]
    elif path[0] == "text":
        step["path"] = path[1]
    else:
        raise Unsupported(f"a path of kind {path[0]}")
    return step


def parse_step(tokens, env):
    """`REQUEST `shouldRespondWith` MATCHER [{ … }]` → a step dict."""
    p = Parser(tokens, env)
    step = request_of(p)
    if p.peek() != ("tick", "`shouldRespondWith`"):
        raise Unsupported(f"after the request: {p.peek()[1]!r}")
    p.next()
    matcher = p.atom()
    expect = {"status": 200, "body": None, "headers": [], "json_type": False, "checks": []}
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
    global FIXTURES_DIR
    FIXTURES_DIR = os.path.join(os.path.dirname(path), "..", "..", "fixtures")
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
            text = line
            while j < len(lines) and (not lines[j].strip() or indent_of(lines[j]) > ind):
                text += "\n" + lines[j]
                j += 1
            for name, expr in let_bindings(text):
                try:
                    value = Parser(tokenize(expr), {n: v for _, n, v in lets
                                                    if not isinstance(v, Unsupported)}).expr()
                except Unsupported as e:
                    value = e
                lets.append((ind - 1, name, value))
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
                for stmt in stmts:
                    toks = tokenize(stmt)
                    for name in broken_lets:
                        if ("ident", name) in toks:
                            raise broken_lets[name]
                    if toks and toks[0] == ("ident", "pendingWith"):
                        case["pending"] = True
                        continue
                    body_statement(stmt, env, steps)
                if any(s.get("bound") and not s["expect"]["checks"] for s in steps):
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
