#!/usr/bin/env python3
"""Writes corpus.txt: ~300 KB of plain English prose for the reference loop (byte-level tokens, vocab 256).

The text is generated deterministically (fixed seed, Python's own Mersenne Twister) from a small grammar of
short narrative and descriptive sentences, written for this project and dedicated to the public domain, so that
the corpus has real English spelling, word order and punctuation (the loss visibly falls) without any
third-party text. Run `python3 make_corpus.py` to regenerate the identical file."""
import random

rng = random.Random(20240601)

PEOPLE = ["the miller", "the old farmer", "a young sailor", "the doctor", "the schoolteacher", "a tired traveller",
          "the baker", "the ferryman", "a quiet girl", "the blacksmith", "her brother", "the shepherd",
          "the captain", "an old woman", "the carpenter", "the innkeeper", "a small boy", "the gardener"]
NAMES = ["Anna", "Thomas", "Martha", "John", "Clara", "Henry", "Ellen", "Samuel", "Rose", "William", "Lucy",
         "Edward", "Mary", "George", "Alice", "Peter"]
PLACES = ["the river", "the village", "the market", "the harbour", "the old mill", "the forest", "the hill",
          "the church", "the bridge", "the station", "the farm", "the inn", "the garden", "the shore", "the valley"]
TIMES = ["In the morning", "At noon", "In the evening", "Late at night", "Before dawn", "On Sunday",
         "In the spring", "When the rain stopped", "After supper", "At the end of the summer", "One cold winter day"]
VERBS_MOVE = ["walked to", "ran down to", "went back to", "rode slowly to", "climbed up to", "came home from",
              "hurried across", "wandered along", "returned to", "set out for"]
THINGS = ["a letter", "a basket of apples", "an old lantern", "a loaf of bread", "a wooden box", "a small boat",
          "a silver key", "a bundle of wood", "a map", "a pair of boots", "a jug of milk", "a book of songs"]
ADJ = ["quiet", "cold", "bright", "dark", "warm", "narrow", "wide", "green", "grey", "empty", "busy", "still",
       "old", "gentle", "wild", "clear"]
NOUNS = ["sky", "road", "water", "wind", "field", "house", "light", "door", "sea", "street", "grass", "snow"]
FEEL = ["was glad", "felt uneasy", "was very tired", "laughed", "said nothing", "began to sing", "sat down to rest",
        "thought of home", "smiled", "was afraid", "wept a little", "shook with cold"]
SAYS = ["We must leave before the storm comes", "I have never seen the river so high",
        "The bread will be ready at noon", "Nobody has opened that door for many years",
        "Tell your mother that I will come tomorrow", "The road to the town is long and the night is near",
        "There is a light in the window of the old mill", "You should not walk alone by the water",
        "Every man in the village knows the story", "Keep the key safe and say nothing"]


def cap(s):
    return s[0].upper() + s[1:]


def who():
    return rng.choice(NAMES) if rng.random() < 0.4 else rng.choice(PEOPLE)


def sentence():
    k = rng.randrange(8)
    a, b = who(), who()
    if k == 0:
        return f"{rng.choice(TIMES)}, {a} {rng.choice(VERBS_MOVE)} {rng.choice(PLACES)}."
    if k == 1:
        return f"The {rng.choice(NOUNS)} was {rng.choice(ADJ)} and the {rng.choice(NOUNS)} was {rng.choice(ADJ)}."
    if k == 2:
        return f"{cap(a)} gave {b} {rng.choice(THINGS)}, and {b} {rng.choice(FEEL)}."
    if k == 3:
        return f"\"{rng.choice(SAYS)},\" said {a}."
    if k == 4:
        return f"{cap(a)} found {rng.choice(THINGS)} near {rng.choice(PLACES)}."
    if k == 5:
        return f"When {a} saw the {rng.choice(ADJ)} {rng.choice(NOUNS)}, {rng.choice(['he', 'she'])} {rng.choice(FEEL)}."
    if k == 6:
        return f"Nobody in {rng.choice(PLACES)} knew why {a} had gone to {rng.choice(PLACES)}."
    return f"{cap(a)} and {b} stood by {rng.choice(PLACES)} until the {rng.choice(NOUNS)} grew {rng.choice(ADJ)}."


def main():
    out, size, chapter = [], 0, 1
    while size < 300_000:
        if rng.random() < 0.03 or not out:
            block = f"\nCHAPTER {chapter}\n\n"
            chapter += 1
        else:
            block = " ".join(sentence() for _ in range(rng.randint(3, 7))) + "\n\n"
        out.append(block)
        size += len(block)
    with open("corpus.txt", "w", encoding="ascii") as f:
        f.write("".join(out).lstrip("\n"))


if __name__ == "__main__":
    main()
