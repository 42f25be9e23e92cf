"""ISO 4217 currency codes, for the billing parsers to validate a line's ``currency``.

``ACTIVE`` is ISO 4217 list one (current codes) as of 2025-06 (amendment 179: XCG, the Caribbean
guilder), less ``XTS`` (reserved for testing) and ``XXX`` (no currency): a bill is never in
either. ``WITHDRAWN_RECENTLY`` holds codes withdrawn since 2023 that a bill for an earlier period
may still carry. ``BILLING_CURRENCIES`` is what a bill line may use: the union.

Codes are upper case; compare after ``str.upper()``.
"""

from __future__ import annotations

_ACTIVE_CODES = """
    AED AFN ALL AMD AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB BOV BRL BSD BTN BWP BYN
    BZD CAD CDF CHE CHF CHW CLF CLP CNY COP COU CRC CUP CVE CZK DJF DKK DOP DZD EGP ERN ETB EUR FJD
    FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR IQD IRR ISK JMD JOD JPY KES KGS
    KHR KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK
    MXN MXV MYR MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR RON RSD RUB RWF SAR
    SBD SCR SDG SEK SGD SHP SLE SOS SRD SSP STN SVC SYP SZL THB TJS TMT TND TOP TRY TTD TWD TZS UAH
    UGX USD USN UYI UYU UYW UZS VED VES VND VUV WST XAF XAG XAU XBA XBB XBC XBD XCD XCG XDR XOF XPD
    XPF XPT XSU XUA YER ZAR ZMW ZWG
"""
ACTIVE: frozenset[str] = frozenset(_ACTIVE_CODES.split())

#: Withdrawn since 2023: HRK (Croatia joined the euro, 2023), SLL (→ SLE), ZWL (→ ZWG, 2024),
#: ANG (→ XCG, 2025).
WITHDRAWN_RECENTLY: frozenset[str] = frozenset({"HRK", "SLL", "ZWL", "ANG"})

BILLING_CURRENCIES: frozenset[str] = ACTIVE | WITHDRAWN_RECENTLY
