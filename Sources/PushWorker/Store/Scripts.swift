import PushRedis

// The store's Lua scripts and the replies they give. Script sources are loaded by their SHA-1
// (`NotificationStore.prepare()`): editing one, even its comments, makes it another script.
extension NotificationStore {
    enum Scripts {
        /// Claims notifications whose claim is more than a plain `HSETNX` (a state already there,
        /// a `registeredAt`, a device limit, no permit this second, dead owners to take over
        /// from); one call per hash slot (`docs/architecture.md#the-claim`).
        ///
        /// - `KEYS[4i-3]`: the claims bucket of notification i's fingerprint in this generation,
        ///   `c:<T><g>:<bucket>`.
        /// - `KEYS[4i-2]`: the same bucket of the generation before, `c:<T><g-1>:<bucket>`.
        /// - `KEYS[4i-1]`: its app's token verdicts of this generation, `u:<T><app>:<env>:<g>`.
        /// - `KEYS[4i]`: its device counter for this hour, `rd:<T><app>:<token>:<hour>`, or its
        ///   bucket's key again when it has no device limit (the counter is then not touched).
        /// - `ARGV[1]`: the claiming owner's claim id, 8 bytes (``NotificationStore/claimId``).
        /// - `ARGV[2]`: when a bucket of this generation expires (UNIX seconds).
        /// - `ARGV[3]`: the claim ids of owners known to be dead, one after the other.
        /// - `ARGV[4]`: how a claim of an earlier build, `<owner>|<topic mark>|<partition>|<offset>`,
        ///   names the topic: `|<topic mark>|` (``NotificationStore/legacyTopicMark(_:)``).
        /// - `ARGV[5i]`: notification i's message key, 8 bytes
        ///   (``ClaimNames/message(topic:partition:offset:)``).
        /// - `ARGV[5i+1]`: its token in lowercase hex.
        /// - `ARGV[5i+2]`: its options, `<registeredAt>|<device limit per hour>|<1 if it may be
        ///   sent this second, else 0>`, or `''` for none of them and a permit.
        /// - `ARGV[5i+3]`: its fingerprint, the bucket's field.
        /// - `ARGV[5i+4]`: its message as a claim of an earlier build ends, `<partition>|<offset>`.
        ///
        /// A claim of an earlier build for this same message is taken over (`R`): that build is
        /// stopped before this one starts (`docs/operations.md`).
        ///
        /// Returns one ``ClaimReply`` per notification, its letter followed by its detail.
        static let claim = RedisScript(
            #"""
            -- KEYS: 4 per notification: its claims bucket of this generation and of the one before,
            -- its app's token verdicts, its device counter for this hour (one slot on a cluster).
            -- ARGV: owner's claim id (8 bytes), this generation's expiry, dead owners' claim ids (8 bytes each),
            -- '|<topic mark>|' of earlier builds' claims, then 5 per notification: its message key (8 bytes),
            -- token, '<registeredAt>|<device limit per hour>|<1 if it may be sent this second, else 0>'
            -- ('' for the usual), fingerprint, '<partition>|<offset>'.
            -- A state is '<owner><message>' (claimed, 16 bytes), 'F' (released); earlier builds left
            -- 'D' (settled) and '<owner name>|<topic mark>|<partition>|<offset>' (claimed).
            local owner, expiry, deadIds, legacyTopic = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
            local dead = {}
            for at = 1, #deadIds, 8 do dead[string.sub(deadIds, at, at + 7)] = true end
            local out = {}
            for i = 1, #KEYS / 4 do
              local key, pkey, ukey, dkey = KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i]
              local a = 5 * i
              local msg, tok, opts, fp, where = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4]
              local reg, dlim, permit = '', 0, '1'
              if opts ~= '' then
                local r, d, p = string.match(opts, '^([^|]*)|([^|]*)|(.*)$')
                reg, dlim, permit = r, tonumber(d), p
              end
              local mine = owner .. msg
              local cur = redis.call('HGET', key, fp)
              if cur == 'F' then cur = nil end
              local prev = redis.call('HGET', pkey, fp)
              if prev == 'F' then prev = nil end
              -- The generation before decides, unless this one says more: a fresh claim of this
              -- call's first round gives way to it.
              local state, skey = cur, key
              if prev and (not cur or cur == mine or (prev == 'D' and cur ~= 'D')) then
                if cur == mine then redis.call('HSET', key, fp, 'F') end
                state, skey = prev, pkey
              end
              local code
              if state == 'D' then
                code = 'C'
              elseif state then
                local sowner = string.sub(state, 1, 8)
                if #state ~= 16 then
                  -- An earlier build's claim: this message's is taken over (its build is stopped).
                  local tail = legacyTopic .. where
                  if string.sub(state, -#tail) == tail then
                    redis.call('HSET', skey, fp, mine)
                    code = 'R'
                  else
                    code = 'X'
                  end
                elseif string.sub(state, 9) ~= msg then
                  code = 'X'
                elseif sowner == owner or dead[sowner] then
                  if state ~= mine then redis.call('HSET', skey, fp, mine) end
                  code = 'R'
                else
                  code = 'O' .. sowner
                end
              else
                local unreg = redis.call('HGET', ukey, tok)
                if unreg and (reg == '' or tonumber(reg) <= tonumber(string.match(unreg, '^[^|]*'))) then
                  code = 'U' .. unreg
                elseif permit ~= '1' then
                  code = 'T'
                elseif dlim > 0 then
                  local count = redis.call('INCR', dkey)
                  if count == 1 then redis.call('EXPIRE', dkey, '3700') end
                  if count > dlim then code = 'L' end
                end
                code = code or 'S'
                if code ~= 'T' then
                  redis.call('HSET', key, fp, mine)
                  if redis.call('TTL', key) == -1 then redis.call('EXPIREAT', key, expiry) end
                end
              end
              out[#out + 1] = code
            end
            return out
            """#
        )

        /// Releases claims of this owner (their notifications were never written to a gateway):
        /// each becomes `F`, so that the message consumed again claims it afresh. A bucket never
        /// empties, so it keeps the expiry it was given (``NotificationStore/write``).
        ///
        /// - `KEYS[i]`: a claims bucket, `c:<T><g>:<bucket>` (one slot on a cluster).
        /// - `ARGV[1]`: the owner's claim id, 8 bytes.
        /// - `ARGV[i+1]`: the fingerprint in `KEYS[i]`.
        static let release = RedisScript(
            #"""
            local mine = ARGV[1]
            for i, key in ipairs(KEYS) do
              local state = redis.call('HGET', key, ARGV[i + 1])
              if state and #state == 16 and string.sub(state, 1, 8) == mine then redis.call('HSET', key, ARGV[i + 1], 'F') end
            end
            return 0
            """#
        )

        /// Takes up to `ARGV[1]` of what is left of an app's per-second limit and returns how
        /// many it took. The counter lives a minute: long enough for every worker, whatever its
        /// clock's offset or a slow round trip, to find it while its second is current.
        ///
        /// - `KEYS[1]`: the app's counter for this second, `ra:<app>:<second>`.
        /// - `ARGV[1]`: permits wanted.
        /// - `ARGV[2]`: the app's limit per second.
        static let takePermits = RedisScript(
            #"""
            local used = tonumber(redis.call('GET', KEYS[1]) or '0')
            local n = math.min(tonumber(ARGV[1]), tonumber(ARGV[2]) - used)
            if n <= 0 then return 0 end
            if redis.call('INCRBY', KEYS[1], n) == n then redis.call('EXPIRE', KEYS[1], '60') end
            return n
            """#
        )

        /// Gives back permits taken by ``takePermits`` but not used; returns 0.
        ///
        /// - `KEYS[1]`: the app's counter for this second, `ra:<app>:<second>`.
        /// - `ARGV[1]`: permits taken but not used.
        static let returnPermits = RedisScript(
            #"""
            if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('DECRBY', KEYS[1], ARGV[1]) end
            return 0
            """#
        )

        /// Sets each written position to its offset unless it already holds a later one (a
        /// partition's new owner starts behind its previous owner and must not move it back);
        /// returns 0.
        ///
        /// - `KEYS[i]`: partition i's written position, `pw:<topic>:<partition>` (all in one slot
        ///   on a cluster).
        /// - `ARGV[1]`: the positions' TTL in seconds.
        /// - `ARGV[i+1]`: partition i's offset.
        static let advancePositions = RedisScript(
            #"""
            for i, key in ipairs(KEYS) do
              local offset = tonumber(ARGV[i + 1])
              if offset > tonumber(redis.call('GET', key) or '-1') then redis.call('SET', key, ARGV[i + 1], 'EX', ARGV[1]) end
            end
            return 0
            """#
        )

        /// Counts a message's token results into its job's summary and says who writes the
        /// summary (`NotificationStore.checkSummaries(_:ttlSeconds:)`).
        ///
        /// - `KEYS[1]`: the counters (hash), `s:{<summaryId>}`.
        /// - `KEYS[2]`: the tokens counted (bitmap), `s:{…}:b`.
        /// - `KEYS[3]`: the failed tokens (list), `s:{…}:f`.
        /// - `KEYS[4]`: the writer, `s:{…}:m`.
        /// - `ARGV[1]`: the checking owner (worker incarnation).
        /// - `ARGV[2]`: the message, `<topic>|<partition>|<offset>`.
        /// - `ARGV[3]`: the keys' TTL in seconds.
        /// - `ARGV[4]`: the job's fingerprint.
        /// - `ARGV[5]`: the job's token count.
        /// - `ARGV[6]`: how many failed tokens are listed at most.
        /// - `ARGV[7]`: a writer known to be dead, `''` for none.
        /// - `ARGV[4i+4]`, `ARGV[4i+5]`, `ARGV[4i+6]`, `ARGV[4i+7]`: token result i's place in
        ///   the job; what it is (`''`: transmitted, a status: a `transmissionError`, `k<type>`:
        ///   another type); its `at`; its token (`''` unless it failed).
        ///
        /// Returns an array whose first element is a ``SummaryReply``.
        static let summary = RedisScript(
            #"""
            -- KEYS: counters (hash), tokens counted (bitmap), failed tokens (list), writer.
            -- ARGV: owner, '<topic>|<partition>|<offset>', ttl, fingerprint, tokens, most failed tokens
            -- listed, a writer known to be dead ('' = none); then 4 per token result: index, what it is ('' = transmitted, a status =
            -- transmissionError, 'k<type>' = another type), at, token.
            local h, b, f, m = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
            local owner, msg, ttl, fp, total, cap, dead = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
            local known = redis.call('HGET', h, 'fp')
            if not known then
              redis.call('HSET', h, 'fp', fp, 'total', ARGV[5], 'done', '0')
            elseif known ~= fp then
              return {'N'}
            end
            local done, first, last, omitted = 0, nil, nil, 0
            local counts, failed = {}, {}
            local room = cap - redis.call('LLEN', f)
            for i = 8, #ARGV, 4 do
              if redis.call('SETBIT', b, ARGV[i], 1) == 0 then
                done = done + 1
                local status, at = ARGV[i + 1], tonumber(ARGV[i + 2])
                local field = 't'
                if string.sub(status, 1, 1) == 'k' then
                  field = status
                elseif status ~= '' then
                  field = 's' .. status
                  if #failed < room then failed[#failed + 1] = status .. '|' .. ARGV[i + 3] else omitted = omitted + 1 end
                end
                counts[field] = (counts[field] or 0) + 1
                if not first or at < first then first = at end
                if not last or at > last then last = at end
              end
            end
            if done > 0 then
              for field, n in pairs(counts) do redis.call('HINCRBY', h, field, n) end
              redis.call('HINCRBY', h, 'done', done)
              if omitted > 0 then redis.call('HINCRBY', h, 'omitted', omitted) end
              if #failed > 0 then redis.call('RPUSH', f, unpack(failed)) end
              local known_first, known_last = tonumber(redis.call('HGET', h, 'first') or ''), tonumber(redis.call('HGET', h, 'last') or '')
              if not known_first or first < known_first then redis.call('HSET', h, 'first', string.format('%d', first)) end
              if not known_last or last > known_last then redis.call('HSET', h, 'last', string.format('%d', last)) end
            end
            for _, key in ipairs({h, b, f}) do redis.call('EXPIRE', key, ttl) end
            if tonumber(redis.call('HGET', h, 'done')) < total then return {'N'} end
            local state = redis.call('GET', m)
            local takeover = '0'
            if state then
              if state == 'D' then return {'D'} end
              local sowner, smsg = string.match(state, '^P|([^|]*)|(.*)$')
              if sowner == owner then
                if smsg ~= msg then return {'N'} end
              elseif sowner == dead then
                takeover = '1'
              else
                local same = '0'
                if smsg == msg then same = '1' end
                return {'O', sowner, same}
              end
            end
            redis.call('SET', m, 'P|' .. owner .. '|' .. msg, 'EX', ttl)
            return {'S', takeover, redis.call('HGETALL', h), redis.call('LRANGE', f, 0, -1)}
            """#
        )

        /// Stores a Live Activity's accepted update unless a newer one (by rank, then
        /// timestamp) is stored; returns 1 when it stored it.
        ///
        /// - `KEYS[1]`: the activity's `la:` key.
        /// - `ARGV[1]`: `<rank><timestamp>|<jobId>`; `ARGV[2]`: its TTL in seconds.
        static let keepNewestActivity = RedisScript(
            #"""
            local old = redis.call('GET', KEYS[1])
            if old then
              local r, t = string.sub(old, 1, 1), tonumber(string.match(old, '^.(%d+)'))
              local nr, nt = string.sub(ARGV[1], 1, 1), tonumber(string.match(ARGV[1], '^.(%d+)'))
              if r > nr or (r == nr and t >= nt) then return 0 end
            end
            redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
            return 1
            """#
        )

        /// Counts one priority-10 update of a Live Activity and returns the count: the hour
        /// starts with the first.
        ///
        /// - `KEYS[1]`: the activity's `lp:` key.
        static let countHighPriority = RedisScript(
            #"""
            local n = redis.call('INCR', KEYS[1])
            if n == 1 then redis.call('EXPIRE', KEYS[1], 3600) end
            return n
            """#
        )

        static let all = [
            claim, release, takePermits, returnPermits, advancePositions, summary, keepNewestActivity,
            countHighPriority,
        ]
    }

    /// The first byte of each of the claim's codes (``Scripts/claim``'s replies, and the
    /// codes the store gives notifications claimed without the script).
    enum ClaimReply: UInt8 {
        /// Claimed: send it.
        case send = 0x53  // "S"
        /// Taken over from this owner or a dead one: send, marked `possibleDuplicate`, unless its
        /// outcome is recorded or its message is before its partition's written position.
        case resend = 0x52  // "R"
        /// Recorded by this same message; followed by its outcome (``RedisKeys`` `o:`). Never
        /// sent by the script: the store gives it to a claim whose outcome it finds.
        case recorded = 0x45  // "E"
        /// Claimed or recorded by another message.
        case duplicate = 0x58  // "X"
        /// Claimed by another worker for this message; followed by that owner's claim id.
        case otherOwner = 0x4F  // "O"
        /// Not run (its slot's commands failed); never sent by the script.
        case busy = 0x57  // "W"
        /// No permit this second (not claimed).
        case throttled = 0x54  // "T"
        /// Over the device's limit this hour (claimed).
        case rateLimited = 0x4C  // "L"
        /// Apple gave a permanent verdict on the token; followed by `<since>|<reason>` (claimed).
        case unregistered = 0x55  // "U"
        /// Settled: its claim says `D`, as earlier builds left it (``RedisKeys`` `c:`).
        case settled = 0x43  // "C"

        /// The reply a code starts with, `nil` for an empty or unknown one.
        init?(code: [UInt8]) {
            guard let first = code.first else { return nil }
            self.init(rawValue: first)
        }
    }

    /// The first element of each of ``Scripts/summary``'s replies.
    enum SummaryReply: UInt8 {
        /// Not for this message to write (results to come, another job with the same id, or
        /// another message of this owner writing it).
        case notYours = 0x4E  // "N"
        /// Written already.
        case written = 0x44  // "D"
        /// Another owner writes it; followed by that owner's name and `1` if for this same
        /// message, else `0`.
        case otherWriter = 0x4F  // "O"
        /// This owner writes it now; followed by `1` if taken over from a dead writer (else
        /// `0`), the counters' fields and values, and the failed tokens.
        case write = 0x53  // "S"
    }
}
