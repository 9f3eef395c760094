# Drives kv with redis-py (see tests/redis_clients.rs); argument: the port. Exits
# non-zero, with the failed assertion, on any answer that is not what Redis gives.
import sys
import redis

port = int(sys.argv[1])
r = redis.Redis(port=port, db=0)
assert r.ping() is True
assert r.set("a", "1") is True
assert r.get("a") == b"1"
assert r.incr("n") == 1
assert r.mset({"m1": "x", "m2": "y"}) is True
assert r.mget("m1", "m2", "none") == [b"x", b"y", None]
assert r.set("t", "v", ex=100) is True
assert 0 < r.ttl("t") <= 100
pipe = r.pipeline()  # a transaction: MULTI ... EXEC
pipe.set("p1", "a").incr("p2").get("p1")
assert pipe.execute() == [True, 1, b"a"]
assert r.getex("t", persist=True) == b"v"
assert r.ttl("t") == -1
assert r.setex("sx", 100, "v") is True
assert r.get("sx") == b"v"
assert sorted(r.keys("m*")) == [b"m1", b"m2"]
assert sorted(r.scan_iter(match="p*", count=1)) == [b"p1", b"p2"]
with r.pipeline() as watched:
    watched.watch("a")
    r.set("a", "2")
    watched.multi()
    watched.set("a", "3")
    try:
        watched.execute()
        raise AssertionError("EXEC ran though a watched key changed")
    except redis.WatchError:
        pass
assert r.get("a") == b"2"
assert r.getset("a", "3") == b"2"
assert r.type("a") == b"string"
assert r.rename("a", "b") is True
assert r.incrbyfloat("f", "10.5") == 10.5
assert r.incrbyfloat("f", "0.1") == 10.6
assert r.append("b", "4") == 2
info = r.info()
assert info["redis_version"] and info["db0"]["keys"] == r.dbsize(), info
# The name is the connection's: asked on the same one.
one = redis.Redis(port=port, single_connection_client=True)
assert one.client_setname("py") is True
assert one.client_getname() in (b"py", "py")
assert r.client_id() != one.client_id()
assert r.delete("b", "f") == 2
try:
    redis.Redis(port=port, db=1).ping()
    raise AssertionError("db=1 was accepted")
except redis.RedisError as error:
    assert "DB index is out of range" in str(error), repr(error)
print("redis-py", redis.__version__, "ok")
