"""Everyday chat requests, many shapes: the second, broader half of the prompts a chat draft is distilled on.

The first half (chat_prompts.py) asks 18 questions of 122 school topics, so a draft learns those phrasings
and little else: its agreement with the target was 0.55 on answers like them and 0.32 on new questions.
Here each family of request (how-to, why, compare, write, advise, recommend, compute, rewrite, code, ...)
has its own phrasings and its own things to ask about, and a seeded draw mixes them. None names a subject or
copies a phrasing of the held-out questions in specviz/prompts/sets.py (tests/test_chat_prompts.py checks).
"""

from __future__ import annotations

import itertools
import random

TASKS = [
    "boil an egg",
    "fix a flat bicycle tyre",
    "plant a tree",
    "write a cover letter",
    "change a light bulb",
    "make pancakes",
    "tie a tie",
    "start a podcast",
    "organise a small closet",
    "iron a shirt",
    "bake cookies",
    "make a budget for the month",
    "set up a fish tank",
    "learn to juggle",
    "clean a laptop keyboard",
    "prepare for a job interview",
    "make a paper airplane",
    "start a vegetable garden on a balcony",
    "make a smoothie",
    "brew coffee with a French press",
    "write a good email subject line",
    "sharpen a kitchen knife",
    "train for a 5K race",
    "remove a coffee stain from a shirt",
    "make a simple salad dressing",
    "fold a fitted sheet",
    "back up the photos on my phone",
    "build a birdhouse",
    "memorise a short speech",
    "make friends in a new city",
    "cook rice on the stove",
    "wrap a present neatly",
    "write a book review",
    "pick a ripe avocado",
    "start learning the piano",
    "keep houseplants alive",
    "plan a surprise party",
    "make homemade pizza dough",
    "read a map",
    "make a campfire safely",
    "teach a dog to sit",
    "unclog a sink",
    "choose a good password",
    "prepare for a long flight",
    "write a short poem",
    "make a to-do list that works",
    "take better photos with a phone",
    "save for a holiday",
    "make lemonade",
    "clean windows without streaks",
    "start journaling",
    "make a paper boat",
    "learn basic first aid",
    "get better at drawing",
    "care for a goldfish",
    "make a cheese omelette",
    "decorate a small bedroom",
    "plan a picnic",
    "write a speech for a wedding",
    "stop procrastinating",
]

TASK_TEMPLATES = [
    "What are the steps to {x}?",
    "Walk me through how to {x}.",
    "I want to {x}. Where do I start?",
    "Give me simple instructions to {x}.",
    "What is the easiest way to {x}?",
    "What mistakes do people make when they try to {x}?",
]

PHENOMENA = [
    "bread rise in the oven",
    "we yawn",
    "stars twinkle",
    "onions make people cry",
    "ice float on water",
    "dogs wag their tails",
    "we get hiccups",
    "boats float",
    "metal feel colder than wood",
    "birds fly south in winter",
    "our ears pop on a plane",
    "popcorn pop",
    "bubbles look rainbow-coloured",
    "we dream at night",
    "rivers bend",
    "zebras have stripes",
    "apples turn brown after cutting",
    "we have fingerprints",
    "the moon look bigger near the horizon",
    "some people get seasick",
    "bees make honey",
    "milk go sour",
    "our stomachs growl",
    "owls hunt at night",
    "mirrors flip left and right",
    "we get goosebumps",
    "the sea taste salty",
    "snow look white",
    "people have different blood types",
    "candles go out when you blow on them",
    "giraffes have long necks",
    "babies sleep so much",
    "chilli peppers taste hot",
    "soap remove grease",
    "thunder come after lightning",
    "plants need sunlight",
    "hair turn grey",
    "some animals hibernate",
    "spicy food make your nose run",
    "camels have humps",
    "the wind blow",
    "we sneeze",
    "ice cream melt so fast",
    "fireflies glow",
]

PHENOMENON_TEMPLATES = [
    "Why do {x}?",
    "Can you tell me why {x}?",
    "What makes {x}?",
    "Is there a simple reason why {x}?",
]

PAIRS = [
    ("a virus", "a bacterium"),
    ("an alligator", "a crocodile"),
    ("a lake", "a pond"),
    ("speed", "velocity"),
    ("baking soda", "baking powder"),
    ("a simile", "a metaphor"),
    ("a frog", "a toad"),
    ("a city", "a town"),
    ("a hurricane", "a tornado"),
    ("a novel", "a short story"),
    ("an ape", "a monkey"),
    ("a fruit", "a vegetable"),
    ("a debit card", "a credit card"),
    ("a moth", "a butterfly"),
    ("a sea", "an ocean"),
    ("mass", "weight"),
    ("a planet", "a star"),
    ("a rabbit", "a hare"),
    ("a wolf", "a dog"),
    ("RAM", "storage"),
    ("a laptop", "a tablet"),
    ("a poem", "a song"),
    ("an atom", "a molecule"),
    ("a mountain", "a hill"),
    ("jam", "jelly"),
    ("a president", "a prime minister"),
    ("a bay", "a gulf"),
    ("an emu", "an ostrich"),
    ("a loan", "a gift"),
    ("a violin", "a cello"),
    ("hardware", "software"),
    ("a biography", "an autobiography"),
    ("a dolphin", "a shark"),
    ("a square", "a rectangle"),
    ("latitude", "longitude"),
    ("a museum", "a gallery"),
    ("a cold", "the flu"),
]

PAIR_TEMPLATES = [
    "How is {a} different from {b}?",
    "Compare {a} and {b}.",
    "Is {a} the same thing as {b}?",
    "What do {a} and {b} have in common, and how do they differ?",
]

SUBJECTS = [
    "a lighthouse keeper",
    "a lost umbrella",
    "a robot who learns to cook",
    "a snowy village",
    "an old bicycle",
    "a dragon who is afraid of fire",
    "the first day of school",
    "a bakery at dawn",
    "a forgotten key",
    "a city in the year 3000",
    "a friendly ghost",
    "a train journey across the desert",
    "a tiny mouse with big dreams",
    "a rainy afternoon in a library",
    "a kite caught in a tree",
    "two rival chefs",
    "a spaceship running out of fuel",
    "a garden that grows at night",
    "a clock that runs backwards",
    "a shy giraffe",
    "a pirate who hates the sea",
    "a message in a bottle",
    "a busy market",
    "a detective penguin",
    "the last leaf of a book",
    "a magic paintbrush",
    "a grandmother's recipe",
    "an astronaut's first step",
    "a snowman in spring",
    "a talking tree",
    "a music box",
    "a lonely robot",
    "a city park in the morning",
    "a hot air balloon",
    "a brave little boat",
    "a secret door",
    "a fox and a crow",
    "a storm over the harbour",
    "a new pair of shoes",
    "the sound of rain on a roof",
]

WRITING_FORMS = [
    "a short poem",
    "a four-line poem",
    "a riddle",
    "a fable with a moral",
    "a diary entry",
    "the chorus of a song",
    "the opening paragraph of a story",
    "a short dialogue",
    "a fairy tale in five sentences",
    "a bedtime story",
    "a rhyming couplet",
    "a funny story",
    "a mystery story opening",
    "a short description",
]

WRITING_TEMPLATES = [
    "Write {form} about {x}.",
    "Could you write {form} about {x}?",
    "Compose {form} featuring {x}.",
]

MESSAGES = [
    "an email to my teacher asking for one more day to finish my homework",
    "a birthday message for my grandmother",
    "a note inviting my coworkers to a team lunch",
    "a polite complaint to a shop about a broken kettle",
    "a message congratulating a friend on a new job",
    "an out-of-office reply for a week of holiday",
    "a short welcome speech for new club members",
    "a message asking my landlord to fix the heating",
    "an invitation to a garden party",
    "a get-well-soon card for a colleague",
    "a reminder to my team about Friday's deadline",
    "a short bio for my personal website",
    "a letter to my future self",
    "a note to my roommate about doing the dishes",
    "a product review of a pair of headphones",
    "a short advert for a lost bicycle",
    "an announcement that the library will close early",
    "a job posting for a part-time barista",
    "a farewell message for a coworker who is retiring",
    "a message asking a friend to return a borrowed book",
]

MESSAGE_TEMPLATES = ["Write {x}.", "Help me write {x}.", "Draft {x}."]

RECOMMENDATIONS = [
    "books for a teenager who likes mysteries",
    "healthy snacks for a road trip",
    "names for a new bakery",
    "games to play at a birthday party",
    "hobbies I could start this year",
    "gifts for a friend who loves cooking",
    "board games for a family evening",
    "ways to exercise at home",
    "dishes to cook with potatoes",
    "places to visit in a big city",
    "podcast topics for beginners",
    "names for a goldfish",
    "themes for a school dance",
    "plants that are easy to grow indoors",
    "ways to relax after work",
    "questions to ask at a job interview",
    "team names for a quiz night",
    "things to do on a long train ride",
    "songs for a road trip",
    "ideas for a science fair project",
    "easy dinners for a busy week",
    "ways to reduce plastic at home",
    "ideas for a first date",
    "skills every teenager should learn",
    "ways to celebrate a small win",
]

RECOMMENDATION_TEMPLATES = [
    "Recommend a few {x}.",
    "What are some good {x}?",
    "Could you suggest {n} {x}?",
    "I need {n} {x}.",
]

CONCEPTS = [
    "compound interest",
    "an ecosystem",
    "a budget",
    "a calorie",
    "a fraction",
    "a metaphor",
    "an election",
    "a habitat",
    "a decimal",
    "a volcano's magma chamber",
    "an allergy",
    "a symphony",
    "a spreadsheet formula",
    "a recipe's yield",
    "a food chain",
    "a verb tense",
    "a percentage",
    "an interest rate",
    "a constellation",
    "a carbon footprint",
    "a pension",
    "a mortgage",
    "a thesaurus",
    "an island",
    "a fossil",
    "a hypothesis",
    "a jury",
    "a passport",
    "a currency exchange rate",
    "an orchestra conductor",
    "a paragraph",
    "a synonym",
    "an average",
    "a web browser",
    "a virus scan",
    "a time zone",
    "a tax",
    "a union",
    "a headline",
    "an opinion",
]

CONCEPT_TEMPLATES = [
    "What does {x} mean?",
    "Define {x}, with an example.",
    "Can you explain {x} to a beginner?",
    "What is the purpose of {x}?",
]

JOBS = [
    "nurse",
    "librarian",
    "pilot",
    "architect",
    "chef",
    "electrician",
    "vet",
    "journalist",
    "plumber",
    "dentist",
    "park ranger",
    "software developer",
    "pharmacist",
    "farmer",
    "lawyer",
    "translator",
    "baker",
    "mechanic",
    "police officer",
    "graphic designer",
    "zookeeper",
    "accountant",
    "teacher's assistant",
    "tour guide",
]

JOB_TEMPLATES = [
    "Describe a typical working day for a {x}.",
    "What skills does a {x} need?",
    "How do you become a {x}?",
    "What is the hardest part of being a {x}?",
]

SITUATIONS = [
    "feel nervous before exams",
    "can't fall asleep at night",
    "want to start running but get tired quickly",
    "have too many emails",
    "moved to a new town and feel lonely",
    "keep forgetting people's names",
    "spend too much money on takeaway food",
    "get bored at work",
    "want to read more books",
    "have a big presentation tomorrow",
    "argue with my brother a lot",
    "want to eat more vegetables",
    "keep losing my keys",
    "feel tired every afternoon",
    "want to learn to code",
    "have a messy desk",
    "am afraid of speaking in meetings",
    "want to wake up earlier",
    "have a job offer in another city",
    "find it hard to say no",
    "want to drink less coffee",
    "feel stressed about money",
]

SITUATION_TEMPLATES = [
    "I {x}. What should I do?",
    "Any advice? I {x}.",
    "What would you suggest if I {x}?",
]

ANIMALS = [
    "octopuses",
    "penguins",
    "elephants",
    "owls",
    "sloths",
    "kangaroos",
    "honeybees",
    "dolphins",
    "frogs",
    "parrots",
    "snails",
    "camels",
    "hedgehogs",
    "jellyfish",
    "ants",
    "koalas",
    "polar bears",
    "seahorses",
    "crows",
    "tigers",
    "bats",
    "spiders",
    "horses",
    "goats",
]

ANIMAL_TEMPLATES = [
    "Tell me a fun fact about {x}.",
    "Where do {x} live, and what do they eat?",
    "How do {x} raise their young?",
]

PROCESSES = [
    "how a seed grows into a plant",
    "how bread is made",
    "how a letter gets delivered",
    "how paper is made",
    "how a bill becomes a law",
    "how cheese is made",
    "how a rainbow forms",
    "how a caterpillar becomes a butterfly",
    "how glass is made",
    "how a car engine works",
    "how a bank makes money",
    "how a vaccine is tested",
    "how chocolate is made",
    "how a river is formed",
    "how a song is recorded",
    "how a website reaches my screen",
]

PROCESS_TEMPLATES = ["Explain {x}, step by step.", "Can you describe {x}?"]

CATEGORIES = [
    "animals that live in the Arctic",
    "fruits that are red",
    "famous bridges",
    "instruments in an orchestra",
    "countries in South America",
    "things you find in a kitchen",
    "sports played with a ball",
    "inventions from the last hundred years",
    "vegetables that grow underground",
    "colours in a rainbow",
    "planets in our solar system",
    "words that rhyme with light",
    "birds that cannot fly",
    "things that are round",
    "jobs in a hospital",
    "board games",
    "types of clouds",
    "breakfast foods from around the world",
    "things to pack for a camping trip",
    "ways to say hello in other languages",
]

CATEGORY_TEMPLATES = ["Name {n} {x}.", "List some {x}.", "Give me a list of {x}."]

CODE_TASKS = [
    "reverses a string",
    "checks whether a word is a palindrome",
    "counts the vowels in a sentence",
    "returns the largest number in a list",
    "converts Celsius to Fahrenheit",
    "sums the even numbers in a list",
    "removes duplicates from a list",
    "counts how often each word appears in a text",
    "checks whether a year is a leap year",
    "returns the factorial of a number",
    "merges two sorted lists",
    "finds the average of a list of numbers",
    "capitalises the first letter of every word",
    "returns the second smallest item in a list",
    "reads a text file and prints its lines",
    "checks whether two words are anagrams",
]

CODE_TEMPLATES = [
    "Write a Python function that {x}.",
    "Show me Python code that {x}.",
    "How would I write a function in Python that {x}?",
]

SENTENCES = [
    "me and him goes to the store yesterday",
    "the meeting have been moved to thursday becuase of the holiday",
    "she dont like when people is late",
    "their going to announce the results tomorow",
    "i has finished my homework but forget to bring it",
    "we was planning a trip to the mountains but it rain",
    "the dog chased it's tail for a hole minute",
    "can you sent me the report before friday",
    "our team have won three games in a row",
    "he buyed a new car last week",
]

SENTENCE_TEMPLATES = [
    "Correct the grammar in this sentence: {x}",
    "Fix the mistakes: {x}",
    "Make this sentence formal and correct: {x}",
]

PASSAGES = [
    "The town council met on Monday to discuss the new bike lanes. Most residents supported the plan, but some "
    "shop owners worried about losing parking spaces. The council agreed to test the lanes for six months.",
    "Honeybees communicate by dancing. A bee that finds flowers returns to the hive and moves in a figure-eight "
    "pattern. The angle of the dance tells the other bees which way to fly, and its length tells them how far.",
    "The library will be closed for repairs from the first to the fifteenth of March. During this time, books "
    "can be returned at the community centre. Online services, including e-books, will remain available.",
    "Maria started her bakery with one oven and a handful of recipes from her grandmother. Ten years later, the "
    "bakery employs twelve people and sells bread to restaurants across the city.",
    "Regular exercise improves sleep, mood and memory. Experts recommend at least 150 minutes of moderate activity "
    "a week, such as brisk walking or cycling, spread over several days.",
    "The company's new phone has a larger screen, a better camera and a battery that lasts two days. However, it "
    "is more expensive than last year's model and no longer comes with a charger.",
    "In 1969, astronauts landed on the Moon for the first time. They collected rocks, took photographs and planted "
    "a flag before returning safely to Earth four days later.",
    "Our school's recycling project collected over two tonnes of paper this year. The money raised will pay for "
    "new books in the library and a trip to the science museum.",
]

PASSAGE_TEMPLATES = [
    "Summarise this in one sentence:\n\n{x}",
    "What is the main idea of this text?\n\n{x}",
    "Rewrite this for a young child:\n\n{x}",
    "Turn this into three bullet points:\n\n{x}",
]

QUESTIONS_OF_OPINION = [
    ("read books", "watch films"),
    ("live in the city", "live in the countryside"),
    ("work from home", "work in an office"),
    ("travel by train", "fly"),
    ("learn alone", "learn in a group"),
    ("rent a home", "buy a home"),
    ("exercise in the morning", "exercise in the evening"),
    ("cook at home", "eat out"),
    ("save money", "spend it on experiences"),
    ("have a dog", "have a fish"),
    ("write by hand", "type on a computer"),
    ("study music", "study art"),
]

OPINION_TEMPLATES = ["Is it better to {a} or to {b}?", "Should I {a} or {b}? Give reasons for both."]


def _word_problems(rng: random.Random, count: int) -> list[str]:
    """Small arithmetic in words, with fresh numbers each: the target explains its sums in many token shapes."""
    shapes = [
        lambda: f"A shop sells pens for {rng.randint(2, 9)} dollars each. How much do {rng.randint(3, 12)} pens cost?",
        lambda: (
            f"If a train travels {rng.choice([60, 80, 90, 120, 150])} kilometres in {rng.choice([1, 2, 3])} hours, how fast is it going?"
        ),
        lambda: f"What is {rng.randint(12, 99)} plus {rng.randint(12, 99)}?",
        lambda: f"What is {rng.randint(3, 12)} multiplied by {rng.randint(3, 12)}?",
        lambda: f"Convert {rng.randint(2, 40)} kilometres to metres.",
        lambda: f"I have {rng.randint(20, 60)} apples and give away {rng.randint(2, 19)}. How many are left?",
        lambda: f"What is {rng.choice([10, 20, 25, 50])} percent of {rng.choice([40, 80, 120, 200, 360])}?",
        lambda: (
            f"A recipe needs {rng.randint(2, 4)} eggs for {rng.randint(4, 6)} people. How many eggs for {rng.randint(8, 12)} people?"
        ),
        lambda: f"How many minutes are there in {rng.randint(2, 9)} hours?",
        lambda: f"A rectangle is {rng.randint(3, 15)} cm long and {rng.randint(2, 9)} cm wide. What is its area?",
    ]
    return [rng.choice(shapes)() for _ in range(count)]


def _fill(templates: list[str], values, **extra) -> list[str]:
    return [template.format(x=value, **extra) for template in templates for value in values]


def everyday_prompts(count: int | None = None, seed: int = 1) -> list[str]:
    """`count` distinct requests (None: all) drawn evenly from every family, shuffled with a fixed seed."""
    rng = random.Random(seed)
    families = [
        _fill(TASK_TEMPLATES, TASKS),
        _fill(PHENOMENON_TEMPLATES, PHENOMENA),
        [template.format(a=a, b=b) for template in PAIR_TEMPLATES for a, b in PAIRS],
        [t.format(form=form, x=x) for t, form, x in itertools.product(WRITING_TEMPLATES, WRITING_FORMS, SUBJECTS)],
        _fill(MESSAGE_TEMPLATES, MESSAGES),
        [t.format(n=n, x=x) for t in RECOMMENDATION_TEMPLATES for x in RECOMMENDATIONS for n in ("three", "five")],
        _fill(CONCEPT_TEMPLATES, CONCEPTS),
        _fill(JOB_TEMPLATES, JOBS),
        _fill(SITUATION_TEMPLATES, SITUATIONS),
        _fill(ANIMAL_TEMPLATES, ANIMALS),
        _fill(PROCESS_TEMPLATES, PROCESSES),
        [t.format(n=n, x=x) for t in CATEGORY_TEMPLATES for x in CATEGORIES for n in ("three", "five", "four")],
        _fill(CODE_TEMPLATES, CODE_TASKS),
        _fill(SENTENCE_TEMPLATES, SENTENCES),
        _fill(PASSAGE_TEMPLATES, PASSAGES),
        [t.format(a=a, b=b) for t in OPINION_TEMPLATES for a, b in QUESTIONS_OF_OPINION],
        _word_problems(rng, 900),
    ]
    for family in families:
        rng.shuffle(family)
    chosen: list[str] = []
    seen: set[str] = set()
    for round_of_picks in itertools.zip_longest(*families):  # one from each family in turn: small families run out first
        for prompt in round_of_picks:
            if prompt is not None and prompt not in seen:
                seen.add(prompt)
                chosen.append(prompt)
    chosen = chosen[:count]
    rng.shuffle(chosen)
    return chosen


# -- the third part: the wider world ------------------------------------------------------------------

PEOPLE = [
    "Marie Curie",
    "Leonardo da Vinci",
    "Isaac Newton",
    "Ada Lovelace",
    "Nelson Mandela",
    "Albert Einstein",
    "Cleopatra",
    "William Shakespeare",
    "Frida Kahlo",
    "Martin Luther King Jr.",
    "Charles Darwin",
    "Mozart",
    "Galileo Galilei",
    "Jane Austen",
    "Mahatma Gandhi",
    "Amelia Earhart",
    "Nikola Tesla",
    "Rosa Parks",
    "Confucius",
    "Beethoven",
    "Florence Nightingale",
    "Pablo Picasso",
    "Alan Turing",
    "Queen Victoria",
    "Julius Caesar",
    "Vincent van Gogh",
    "Harriet Tubman",
    "Thomas Edison",
    "Aristotle",
    "Genghis Khan",
]

PERSON_TEMPLATES = [
    "Who was {x}?",
    "Tell me about {x} in a short paragraph.",
    "What is {x} best known for?",
    "Write a short biography of {x}.",
    "What can we learn from {x}?",
    "Describe the life of {x} for a school report.",
]

PLACES = [
    "Paris",
    "Tokyo",
    "Rome",
    "New York",
    "Cairo",
    "Sydney",
    "Rio de Janeiro",
    "London",
    "Istanbul",
    "Mexico City",
    "Kyoto",
    "Venice",
    "Cape Town",
    "Iceland",
    "Peru",
    "Norway",
    "Morocco",
    "Vietnam",
    "Canada",
    "New Zealand",
    "Scotland",
    "Greece",
    "India",
    "Kenya",
    "Switzerland",
    "Barcelona",
    "Amsterdam",
    "Singapore",
    "Egypt",
    "Chile",
]

PLACE_TEMPLATES = [
    "What is {x} famous for?",
    "What should a visitor see in {x}?",
    "Describe the food of {x}.",
    "Plan a three-day trip to {x}.",
    "Write a postcard from {x}.",
    "Tell me some history of {x}.",
]

DISHES = [
    "pancakes",
    "guacamole",
    "tomato soup",
    "fried rice",
    "a simple omelette",
    "banana bread",
    "hummus",
    "lasagne",
    "chicken curry",
    "a fruit salad",
    "mashed potatoes",
    "chocolate chip cookies",
    "a vegetable stir-fry",
    "sushi rice",
    "lemon cake",
    "pesto",
    "a grilled cheese sandwich",
    "porridge",
    "chili con carne",
    "a Greek salad",
]

DISH_TEMPLATES = [
    "What is a simple recipe for {x}?",
    "Which ingredients do I need for {x}?",
    "How long does it take to cook {x}?",
    "How can I make {x} healthier?",
    "What goes well with {x}?",
]

WORDS = [
    "serendipity",
    "nostalgia",
    "ephemeral",
    "resilience",
    "empathy",
    "procrastinate",
    "ambiguous",
    "meticulous",
    "eloquent",
    "pragmatic",
    "curious",
    "melancholy",
    "benevolent",
    "candid",
    "diligent",
    "frugal",
    "gregarious",
    "humble",
    "inevitable",
    "jubilant",
    "nonchalant",
    "obsolete",
    "persevere",
    "quaint",
    "reluctant",
    "skeptical",
    "tenacious",
    "ubiquitous",
    "vivid",
    "whimsical",
]

WORD_TEMPLATES = [
    "What does the word '{x}' mean?",
    "Use the word '{x}' in three example sentences.",
    "Give me a synonym and an antonym of '{x}'.",
    "Write a short story that uses the word '{x}'.",
]

EVENTS = [
    "the French Revolution",
    "the Moon landing",
    "the fall of the Berlin Wall",
    "the invention of the printing press",
    "the discovery of penicillin",
    "the building of the pyramids",
    "the first Olympic Games",
    "the gold rush",
    "the voyage of the Titanic",
    "the signing of the Magna Carta",
    "the Black Death",
    "the invention of the light bulb",
    "the Wright brothers' first flight",
    "the end of the Second World War",
    "the first computer",
]

EVENT_TEMPLATES = [
    "What happened during {x}?",
    "Why was {x} important?",
    "Explain {x} to a child.",
    "What were the causes and effects of {x}?",
]

WHAT_IFS = [
    "the Moon disappeared",
    "humans could breathe underwater",
    "it never rained again",
    "everyone spoke the same language",
    "we had no electricity for a week",
    "cars could fly",
    "animals could talk",
    "the internet stopped working",
    "we could live on Mars",
    "there were no trees",
    "people lived to 200",
    "the sun was twice as big",
    "schools had no homework",
    "money did not exist",
    "we could read minds",
    "dinosaurs were still alive",
]

WHAT_IF_TEMPLATES = ["What would happen if {x}?", "Imagine a world where {x}. Describe it.", "Write a short story in which {x}."]

PHRASES = [
    "good morning",
    "thank you very much",
    "where is the train station",
    "how much does this cost",
    "I am hungry",
    "see you tomorrow",
]
LANGUAGES = ["French", "Spanish", "German", "Italian", "Japanese"]

ROLES = [
    "a baker",
    "an astronaut",
    "a lighthouse keeper",
    "a zookeeper",
    "a medieval knight",
    "a detective",
    "a pirate captain",
    "a farmer",
    "a museum guide",
    "a robot",
    "a deep-sea diver",
    "a famous chef",
    "a mountain guide",
    "a news reporter",
    "a tree",
    "a river",
    "a school teacher",
    "a taxi driver",
    "a painter",
    "a beekeeper",
]

ROLE_TEMPLATES = [
    "Pretend you are {x} and describe your day.",
    "As {x}, give me one piece of advice.",
    "Write a diary entry as {x}.",
    "What questions would you ask {x}?",
]

ACTIVITIES = [
    "learning to swim",
    "writing an essay",
    "running a marathon",
    "taking notes in class",
    "hosting a dinner party",
    "growing herbs",
    "staying safe online",
    "visiting a new country",
    "starting a small business",
    "drawing portraits",
    "playing chess better",
    "being a good listener",
    "keeping a tidy room",
    "learning a musical instrument",
    "taking care of a puppy",
    "cycling in a city",
    "writing poetry",
    "getting a good night's sleep",
    "saving energy at home",
    "making a presentation",
    "hiking in the mountains",
    "reading faster",
    "cooking for one",
    "working in a team",
]

TIP_TEMPLATES = [
    "Give me three tips for {x}.",
    "Give me five tips for {x}.",
    "What are the best tips for {x}?",
    "What do beginners get wrong about {x}?",
    "Make a one-week plan for {x}.",
]

SPORTS = [
    "tennis",
    "basketball",
    "chess",
    "volleyball",
    "cricket",
    "badminton",
    "golf",
    "table tennis",
    "rugby",
    "baseball",
    "ice hockey",
    "swimming races",
    "archery",
    "fencing",
    "rowing",
]

SPORT_TEMPLATES = [
    "What are the basic rules of {x}?",
    "How can a beginner get started with {x}?",
    "What equipment do you need for {x}?",
    "Who are some famous players of {x}?",
]

HABITS = [
    "drink coffee every day",
    "skip breakfast",
    "walk 10,000 steps a day",
    "eat a lot of sugar",
    "nap in the afternoon",
    "stretch every morning",
    "eat late at night",
    "drink a lot of water",
    "take cold showers",
    "use a phone before bed",
    "eat fish every week",
    "sit all day at a desk",
    "go vegetarian",
    "eat spicy food",
    "do yoga",
]

HABIT_TEMPLATES = ["Is it healthy to {x}?", "What are the effects if I {x}?", "My friend wants to {x}. Is that a good idea?"]

BOOKS = [
    "Romeo and Juliet",
    "Alice's Adventures in Wonderland",
    "The Odyssey",
    "Pride and Prejudice",
    "Moby-Dick",
    "Treasure Island",
    "Frankenstein",
    "The Little Prince",
    "Robinson Crusoe",
    "Don Quixote",
    "Hamlet",
    "The Jungle Book",
    "Peter Pan",
    "Around the World in Eighty Days",
    "The Wind in the Willows",
]

BOOK_TEMPLATES = [
    "What is the story of {x}?",
    "Who are the main characters in {x}?",
    "Why do people still read {x}?",
    "Write a short review of {x}.",
]

TRANSLATION_TEMPLATES = ["How do you say '{p}' in {l}?", "Translate '{p}' into {l}."]


def world_prompts(seed: int = 2) -> list[str]:
    """The third part: people, places, dishes, words, events, what-ifs, translations, roles, tips, sports, habits, books."""
    prompts = [
        *_fill(PERSON_TEMPLATES, PEOPLE),
        *_fill(PLACE_TEMPLATES, PLACES),
        *_fill(DISH_TEMPLATES, DISHES),
        *_fill(WORD_TEMPLATES, WORDS),
        *_fill(EVENT_TEMPLATES, EVENTS),
        *_fill(WHAT_IF_TEMPLATES, WHAT_IFS),
        *(t.format(p=p, l=language) for t in TRANSLATION_TEMPLATES for p in PHRASES for language in LANGUAGES),
        *_fill(ROLE_TEMPLATES, ROLES),
        *_fill(TIP_TEMPLATES, ACTIVITIES),
        *_fill(SPORT_TEMPLATES, SPORTS),
        *_fill(HABIT_TEMPLATES, HABITS),
        *_fill(BOOK_TEMPLATES, BOOKS),
    ]
    prompts = list(dict.fromkeys(prompts))
    random.Random(seed).shuffle(prompts)
    return prompts
