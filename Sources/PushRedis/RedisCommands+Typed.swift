/// The commands the worker sends, each begun by its name and checked for its arity, so that
/// no command name is a string at its call site. A command's key is marked for cluster
/// routing by the method that writes it.
///
/// Commands with a fixed shape are one call each (``get(_:)``, ``set(_:_:expiry:onlyIfAbsent:)``,
/// ``hset(_:field:value:)`` …). Commands whose arguments are built in place, without an array
/// per argument (the claim and outcome pipelines), are begun with ``begin(_:arguments:)`` and
/// their arguments appended: the name is still typed, and the arity still checked.
///
/// ```swift
/// var commands = RedisCommands()
/// commands.set(key, value, expiry: .seconds(86_400))
/// commands.begin(.hset, arguments: 1 + 2 * fields.count)
/// commands.appendKey { keys.appendOutcomes(…, to: &$0) }
/// for (field, value) in fields { commands.append(field); commands.append(value) }
/// ```
public enum RedisCommandName: Sendable, CaseIterable {
    case asking
    case del
    case evalsha
    case exists
    case expire
    case expireAt
    case get
    case hdel
    case hget
    case hgetall
    case hlen
    case hmget
    case hset
    case hsetnx
    case scriptLoad
    case set

    /// The command's name as Redis reads it; `SCRIPT LOAD` is two words, ``subcommand``.
    var name: StaticString {
        switch self {
        case .asking: "ASKING"
        case .del: "DEL"
        case .evalsha: "EVALSHA"
        case .exists: "EXISTS"
        case .expire: "EXPIRE"
        case .expireAt: "EXPIREAT"
        case .get: "GET"
        case .hdel: "HDEL"
        case .hget: "HGET"
        case .hgetall: "HGETALL"
        case .hlen: "HLEN"
        case .hmget: "HMGET"
        case .hset: "HSET"
        case .hsetnx: "HSETNX"
        case .scriptLoad: "SCRIPT"
        case .set: "SET"
        }
    }

    /// The second word of a two-word command.
    var subcommand: StaticString? {
        self == .scriptLoad ? "LOAD" : nil
    }

    /// The arguments after the name the command accepts: `nil` for no upper bound.
    var arity: (minimum: Int, maximum: Int?) {
        switch self {
        case .asking: (0, 0)
        case .del, .exists: (1, nil)
        case .evalsha: (2, nil)
        case .expire, .expireAt, .hget: (2, 2)
        case .get, .hgetall, .hlen, .scriptLoad: (1, 1)
        case .hdel, .hmget: (2, nil)
        case .hset: (3, nil)
        case .hsetnx: (3, 3)
        case .set: (2, 6)
        }
    }
}

/// How long a key set by ``RedisCommands/set(_:_:expiry:onlyIfAbsent:)`` lives.
public enum RedisExpiry: Sendable, Hashable {
    /// `EX`: seconds from now.
    case seconds(Int64)
    /// `PX`: milliseconds from now.
    case milliseconds(Int64)
}

/// A value a typed command takes: bytes, text or a number.
public protocol RedisArgument {
    func append(to commands: inout RedisCommands)
}

extension Array: RedisArgument where Element == UInt8 {
    public func append(to commands: inout RedisCommands) { commands.append(self) }
}

extension String: RedisArgument {
    public func append(to commands: inout RedisCommands) { commands.append(self) }
}

extension Int64: RedisArgument {
    public func append(to commands: inout RedisCommands) { commands.append(self) }
}

extension Int: RedisArgument {
    public func append(to commands: inout RedisCommands) { commands.append(Int64(self)) }
}

extension RedisCommands {
    /// Starts command `name` with `arguments` arguments after its name; the next `arguments`
    /// appends are those.
    public mutating func begin(_ name: RedisCommandName, arguments: Int) {
        let arity = name.arity
        precondition(
            arguments >= arity.minimum && arguments <= (arity.maximum ?? .max),
            "\(name) takes \(arity.minimum)…\(arity.maximum.map(String.init) ?? "") arguments, not \(arguments)"
        )
        // No array of words: this runs for each command of the claim and outcome pipelines.
        if let subcommand = name.subcommand {
            begin(argumentCount: 2 + arguments)
            append(name.name)
            append(subcommand)
        } else {
            begin(argumentCount: 1 + arguments)
            append(name.name)
        }
    }

    /// Starts a command outside ``RedisCommandName`` (an operator's or a test's, such as
    /// `OBJECT ENCODING`), named by its words, with `arguments` arguments after them.
    public mutating func begin(words: [String], arguments: Int) {
        precondition(!words.isEmpty, "a command has at least its name")
        begin(argumentCount: words.count + arguments)
        for word in words { append(word) }
    }

    /// `GET key`.
    public mutating func get(_ key: [UInt8]) {
        begin(.get, arguments: 1)
        appendKey(key)
    }

    /// `SET key value [EX seconds | PX milliseconds] [NX]`.
    public mutating func set(
        _ key: [UInt8],
        _ value: some RedisArgument,
        expiry: RedisExpiry? = nil,
        onlyIfAbsent: Bool = false
    ) {
        begin(.set, arguments: 2 + (expiry == nil ? 0 : 2) + (onlyIfAbsent ? 1 : 0))
        appendKey(key)
        value.append(to: &self)
        switch expiry {
        case .seconds(let seconds):
            append("EX" as StaticString)
            append(seconds)
        case .milliseconds(let milliseconds):
            append("PX" as StaticString)
            append(milliseconds)
        case nil: break
        }
        if onlyIfAbsent { append("NX" as StaticString) }
    }

    /// `DEL key [key …]`: the keys must share a slot on a cluster.
    public mutating func del(_ keys: [UInt8]...) {
        begin(.del, arguments: keys.count)
        for key in keys { appendKey(key) }
    }

    /// `EXISTS key`.
    public mutating func exists(_ key: [UInt8]) {
        begin(.exists, arguments: 1)
        appendKey(key)
    }

    /// `EXPIRE key seconds`.
    public mutating func expire(_ key: [UInt8], seconds: Int64) {
        begin(.expire, arguments: 2)
        appendKey(key)
        append(seconds)
    }

    /// `HGET key field`.
    public mutating func hget(_ key: [UInt8], field: some RedisArgument) {
        begin(.hget, arguments: 2)
        appendKey(key)
        field.append(to: &self)
    }

    /// `HSET key field value`.
    public mutating func hset(_ key: [UInt8], field: some RedisArgument, value: some RedisArgument) {
        begin(.hset, arguments: 3)
        appendKey(key)
        field.append(to: &self)
        value.append(to: &self)
    }

    /// `HDEL key field [field …]`.
    public mutating func hdel(_ key: [UInt8], fields: [some RedisArgument]) {
        begin(.hdel, arguments: 1 + fields.count)
        appendKey(key)
        for field in fields { field.append(to: &self) }
    }

    /// `HGETALL key`.
    public mutating func hgetall(_ key: [UInt8]) {
        begin(.hgetall, arguments: 1)
        appendKey(key)
    }

    /// `HLEN key`.
    public mutating func hlen(_ key: [UInt8]) {
        begin(.hlen, arguments: 1)
        appendKey(key)
    }

    /// `EVALSHA sha1 numkeys key… argument…`: on a cluster the keys must share a slot, and
    /// the first routes the command. A `NOSCRIPT` reply is answered by the connection, which
    /// loads the script and sends the command again.
    public mutating func evalsha(_ script: RedisScript, keys: [[UInt8]], arguments: [some RedisArgument]) {
        beginEvalsha(script, keyCount: keys.count, argumentCount: arguments.count)
        for key in keys { appendKey(key) }
        for argument in arguments { argument.append(to: &self) }
    }

    /// `SCRIPT LOAD source`.
    public mutating func scriptLoad(_ source: String) {
        begin(.scriptLoad, arguments: 1)
        append(source)
    }

    /// `ASKING`: the next command is for a slot being migrated here.
    public mutating func asking() {
        begin(.asking, arguments: 0)
    }
}
