"""core.lru.LRU: the few newest entries, the one cache the model loaders, your own files and head effects share."""

import threading

from attnviz.core.runs.lru import LRU


def test_reading_an_entry_keeps_it_and_the_oldest_unread_one_goes():
    cache = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # now the newest
    cache.put("c", 3)
    assert "b" not in cache and cache.get("a") == 1 and cache.get("c") == 3 and len(cache) == 2
    assert cache.get("b", "gone") == "gone"


def test_a_value_is_made_once_and_a_none_value_is_still_a_hit():
    cache, made = LRU(4), []
    assert cache.get_or_make("k", lambda: made.append(1)) is None
    assert cache.get_or_make("k", lambda: made.append(2)) is None
    assert made == [1]
    cache.clear()
    assert len(cache) == 0


def test_threads_share_it_without_losing_its_bound():
    cache = LRU(8)

    def fill(offset: int) -> None:
        for i in range(500):
            cache.put(offset + i, i)
            cache.get(offset + i // 2)

    threads = [threading.Thread(target=fill, args=(k * 1000,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache) == 8
