"""Short common English words, and passphrases made of them (the shared password of a workshop's
student accounts: easy to read out loud and to type, ~32 bits with 4 words from 256+)."""

from __future__ import annotations

import secrets

WORDS: tuple[str, ...] = tuple("""
able acid aged also area army away baby back bake ball band bank barn base bath bead beam bean bear
beef bell belt best bike bird blue boat body bold bolt bone book boot bowl brave bread brick bring
brush bump bunch cake calm camp cane card care cart case cash cast cave cell chair chalk cheek chess
chin city clay clip clock cloud club coat code coin cold comb cook cool copy cord corn cost crab crow
cube cup curl cycle dark dawn deal deep deer desk dial dice dime dish dock dog door dove draw dream
dress drum duck dust eagle early earth east easy echo edge egg elbow elk even face fair farm fast
fern field film fire fish flag flat flute foam fog fold food foot fork fox frog fruit fuel game
gate gift glad glass glove goat gold golf good grape grass gray green grid gull hair hall hand harp
hat hawk heart heat herb hill home honey hook hope horn horse host hour idea inch iron jam jar jazz
jelly jet job joke juice jump kayak kettle key kind king kite kiwi knee knot lake lamp land lane
lark leaf lemon lens lily lime line lion list loaf lock loft lunar lunch mango map maple march mask
meal melon mild milk mint mist moon moss moth mouse mud mule nail name navy neat nest net night noon
north nose note nut oak oar ocean olive onion open orbit otter oven owl paint palm pan paper park
path peach pear pen pepper piano pie pig pilot pine pink pipe plum poem pond pony pool port pot
quiet quilt rabbit radio rain ramp raven reed ridge ring river road robin rock roof room rope rose
ruby safe sail salt sand scarf seal seed shell ship shoe silk sink sky sled slow snow soap sock sofa
soup south spoon star stem stone storm straw sugar sun swan table taco tank tea tent tide tiger
toast tooth torch towel town toy train tree trip tulip tuna vase vest violin wagon wall wand warm
wave west whale wheat wind wing wolf wood wool yard yarn year zebra zinc zone
""".split())


def passphrase(words: int = 4, sep: str = "-") -> str:
    """`words` random words (secrets.choice) joined by `sep`: e.g. 'otter-lamp-seed-violin'."""
    return sep.join(secrets.choice(WORDS) for _ in range(words))
